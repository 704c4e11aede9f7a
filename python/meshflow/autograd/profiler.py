"""torch.autograd.profiler's names over meshflow.profiler: profile (the
older interface: enabled=, use_cuda=) and record_function."""

from meshflow.profiler import EventList, FunctionEvent, FunctionEventAvg, ProfilerActivity, record_function  # noqa: F401
from meshflow.profiler import profile as _profile

__all__ = ["profile", "record_function", "EventList", "FunctionEvent", "FunctionEventAvg"]


class profile(_profile):
    """As torch.autograd.profiler.profile: records while enabled; the results
    are function_events, key_averages(), table() and export_chrome_trace()."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False, with_flops=False,
                 profile_memory=False, with_stack=False, with_modules=False, use_kineto=False, use_cpu=True,
                 experimental_config=None):
        activities = [ProfilerActivity.CPU]
        if use_cuda or use_device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        super().__init__(activities=activities, record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack, with_flops=with_flops, with_modules=with_modules)
        self.enabled = bool(enabled)

    def __enter__(self):
        return super().__enter__() if self.enabled else self

    def __exit__(self, exc_type, exc, tb):
        if self.enabled:
            super().__exit__(exc_type, exc, tb)
        return False

    @property
    def function_events(self):
        return self.events()

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, header=None,
              top_level_events_only=False):
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit,
                                         max_name_column_width=max_name_column_width, header=header,
                                         top_level_events_only=top_level_events_only)

    @property
    def self_cpu_time_total(self):
        return self.events().self_cpu_time_total
