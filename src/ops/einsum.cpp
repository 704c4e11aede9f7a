// einsum: Einstein summation as a composite of diagonal, sum, permute,
// reshape, expand and bmm, so autograd, autocast and the global interpreter
// see those ops.
//
// Note [Planning einsum]
// Each operand's subscripts become labels (letters, and one label per
// dimension an ellipsis covers, aligned from the right as broadcasting
// does). A label repeated within an operand is its diagonal. A label that
// only one operand has and the output does not is summed out of it first.
// Two operands contract as one bmm: labels both have and later steps need
// are the batch, labels both have and nothing later needs are contracted,
// the rest are the rows of one side or the columns of the other. With three
// or more operands the pair contracted next is the one whose result has the
// fewest elements (greedy, as opt_einsum's default for many operands), and
// ties go to the leftmost pair, so a chain runs left to right.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/reduce.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {

constexpr int kEllipsisBase = 1000;  // label of the i-th ellipsis dim (from the left of the widest ellipsis)

struct Term {
  Tensor t;
  std::vector<int> labels;  // one per dim of t, distinct
};

int letter_label(char c, const std::string& equation) {
  MF_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), ValueError, "einsum: invalid subscript '", c,
           "' in \"", equation, "\" (letters, '...', ',' and '->' only)");
  return c <= 'Z' ? c - 'A' : 26 + (c - 'a');
}

// The labels of one subscript string: letters, and kEllipsis for "...".
constexpr int kEllipsis = -1;
std::vector<int> parse_subscripts(const std::string& s, const std::string& equation) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ') continue;
    if (s[i] == '.') {
      MF_CHECK(s.compare(i, 3, "...") == 0 && !ellipsis, ValueError, "einsum: a subscript has a stray '.' or more "
               "than one '...' in \"", equation, "\"");
      ellipsis = true;
      out.push_back(kEllipsis);
      i += 2;
      continue;
    }
    out.push_back(letter_label(s[i], equation));
  }
  return out;
}

// Sums every dim of term whose label is in `drop`.
void sum_out(Term& term, const std::vector<int>& drop) {
  Shape dims;
  std::vector<int> kept;
  for (size_t d = 0; d < term.labels.size(); ++d) {
    if (std::find(drop.begin(), drop.end(), term.labels[d]) != drop.end()) dims.push_back(int64_t(d));
    else kept.push_back(term.labels[d]);
  }
  if (dims.empty()) return;
  term.t = sum(term.t, dims);
  term.labels = kept;
}

int64_t size_of(const Term& term, int label) {
  for (size_t d = 0; d < term.labels.size(); ++d)
    if (term.labels[d] == label) return term.t.size(int64_t(d));
  return 1;
}

bool has(const std::vector<int>& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

// a and b contracted into one term whose labels are: batch, a's rows, b's columns.
Term contract(Term a, Term b, const std::vector<int>& needed) {
  std::vector<int> batch, rows, cols, inner;
  for (int l : a.labels) {
    if (has(b.labels, l)) (has(needed, l) ? batch : inner).push_back(l);
    else rows.push_back(l);
  }
  for (int l : b.labels)
    if (!has(a.labels, l)) cols.push_back(l);
  auto arrange = [](const Term& term, const std::vector<int>& g0, const std::vector<int>& g1,
                    const std::vector<int>& g2, const std::map<int, int64_t>& sizes) {
    Shape perm, shape;
    for (const auto* group : {&g0, &g1, &g2})
      for (int l : *group) {
        perm.push_back(int64_t(std::find(term.labels.begin(), term.labels.end(), l) - term.labels.begin()));
        shape.push_back(sizes.at(l));
      }
    return expand(permute(term.t, perm), shape);  // size-1 (broadcast) dims grow to the other side's size
  };
  std::map<int, int64_t> sizes;
  int64_t nb = 1, nr = 1, nc = 1, ni = 1;
  for (int l : batch) nb *= sizes[l] = std::max(size_of(a, l), size_of(b, l));
  for (int l : inner) {
    const int64_t sa = size_of(a, l), sb = size_of(b, l);
    MF_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, "einsum: a subscript is used with sizes ", sa, " and ", sb);
    ni *= sizes[l] = std::max(sa, sb);
  }
  for (int l : rows) nr *= sizes[l] = size_of(a, l);
  for (int l : cols) nc *= sizes[l] = size_of(b, l);
  const Tensor lhs = reshape(arrange(a, batch, rows, inner, sizes), {nb, nr, ni});
  const Tensor rhs = reshape(arrange(b, batch, inner, cols, sizes), {nb, ni, nc});
  Shape out_shape;
  Term out;
  for (const auto* group : {&batch, &rows, &cols})
    for (int l : *group) {
      out_shape.push_back(sizes.at(l));
      out.labels.push_back(l);
    }
  out.t = reshape(bmm(lhs, rhs), out_shape);
  return out;
}

}  // namespace

Tensor einsum(const std::string& equation, const TensorList& operands) {
  MF_CHECK(!operands.empty(), ValueError, "einsum: expected at least one operand");
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> inputs;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  MF_CHECK(inputs.size() == operands.size(), ValueError, "einsum: \"", equation, "\" has ", inputs.size(),
           " operand subscripts, got ", operands.size(), " operands");

  // Labels per operand, the ellipsis expanded to as many labels as it covers.
  int64_t widest = 0;
  std::vector<std::vector<int>> subs(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    MF_CHECK(operands[i].defined(), ValueError, "einsum: operand ", i, " is not a tensor");
    subs[i] = parse_subscripts(inputs[i], equation);
    const bool ellipsis = has(subs[i], kEllipsis);
    const int64_t letters = int64_t(subs[i].size()) - (ellipsis ? 1 : 0);
    MF_CHECK(ellipsis ? operands[i].dim() >= letters : operands[i].dim() == letters, ShapeError, "einsum: operand ",
             i, " has ", operands[i].dim(), " dims but subscripts \"", inputs[i], "\" name ", letters);
    if (ellipsis) widest = std::max(widest, operands[i].dim() - letters);
  }
  std::vector<Term> terms;
  std::map<int, int> count;  // occurrences of each letter in all the subscripts (the implicit output's rule)
  for (size_t i = 0; i < operands.size(); ++i) {
    std::vector<int> labels;
    const int64_t covered = operands[i].dim() - (int64_t(subs[i].size()) - (has(subs[i], kEllipsis) ? 1 : 0));
    for (int l : subs[i]) {
      if (l != kEllipsis) {
        labels.push_back(l);
        continue;
      }
      for (int64_t k = 0; k < covered; ++k) labels.push_back(kEllipsisBase + int(widest - covered + k));
    }
    // A repeated label: its diagonal (moved last by diagonal()).
    Term term{operands[i], {}};
    for (size_t d = 0; d < labels.size();) {
      bool merged = false;
      for (size_t e = d + 1; e < labels.size(); ++e) {
        if (labels[e] != labels[d]) continue;
        MF_CHECK(term.t.size(int64_t(d)) == term.t.size(int64_t(e)), ShapeError, "einsum: subscript repeated in "
                 "operand ", i, " has sizes ", term.t.size(int64_t(d)), " and ", term.t.size(int64_t(e)));
        term.t = diagonal(term.t, 0, int64_t(d), int64_t(e));
        const int l = labels[d];
        labels.erase(labels.begin() + int64_t(e));
        labels.erase(labels.begin() + int64_t(d));
        labels.push_back(l);
        merged = true;
        break;
      }
      if (!merged) ++d;
    }
    term.labels = labels;
    for (int l : subs[i])
      if (l != kEllipsis) count[l] += 1;
    terms.push_back(std::move(term));
  }

  // The output's labels: given, or (implicit form) the ellipsis then the
  // letters that occur once, in alphabetical order.
  std::vector<int> output;
  if (arrow != std::string::npos) {
    for (int l : parse_subscripts(equation.substr(arrow + 2), equation)) {
      if (l == kEllipsis) {
        for (int64_t k = 0; k < widest; ++k) output.push_back(kEllipsisBase + int(k));
        continue;
      }
      MF_CHECK(count.count(l) && !has(output, l), ValueError, "einsum: output subscript ",
               char(l < 26 ? 'A' + l : 'a' + l - 26), " of \"", equation,
               "\" must appear in an operand, and only once in the output");
      output.push_back(l);
    }
  } else {
    for (int64_t k = 0; k < widest; ++k) output.push_back(kEllipsisBase + int(k));
    for (int l = 0; l < 52; ++l)
      if (count.count(l) && count[l] == 1) output.push_back(l);
  }

  // Labels needed outside a set of terms: the output's and the other terms'.
  auto needed_besides = [&](const std::vector<size_t>& skip) {
    std::vector<int> needed = output;
    for (size_t j = 0; j < terms.size(); ++j)
      if (std::find(skip.begin(), skip.end(), j) == skip.end())
        for (int l : terms[j].labels) needed.push_back(l);
    return needed;
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int> drop;
    const std::vector<int> needed = needed_besides({i});
    for (int l : terms[i].labels)
      if (!has(needed, l)) drop.push_back(l);
    sum_out(terms[i], drop);
  }
  while (terms.size() > 1) {
    size_t best_i = 0, best_j = 1;
    double best = -1;
    for (size_t i = 0; i < terms.size(); ++i)
      for (size_t j = i + 1; j < terms.size(); ++j) {
        const std::vector<int> needed = needed_besides({i, j});
        double elements = 1;
        std::vector<int> seen;
        for (const Term* t : {&terms[i], &terms[j]})
          for (int l : t->labels)
            if (!has(seen, l) && (has(needed, l) || !(has(terms[i].labels, l) && has(terms[j].labels, l)))) {
              seen.push_back(l);
              elements *= double(std::max(size_of(terms[i], l), size_of(terms[j], l)));
            }
        if (best < 0 || elements < best) best = elements, best_i = i, best_j = j;
      }
    Term merged = contract(terms[best_i], terms[best_j], needed_besides({best_i, best_j}));
    terms.erase(terms.begin() + int64_t(best_j));
    terms[best_i] = std::move(merged);
  }
  Term& last = terms.front();
  std::vector<int> drop;
  for (int l : last.labels)
    if (!has(output, l)) drop.push_back(l);
  sum_out(last, drop);
  Shape perm;
  for (int l : output) {
    MF_CHECK(has(last.labels, l), ValueError, "einsum: output subscript of \"", equation, "\" has no dim");
    perm.push_back(int64_t(std::find(last.labels.begin(), last.labels.end(), l) - last.labels.begin()));
  }
  return perm.empty() ? last.t : permute(last.t, perm);
}

}  // namespace mf
