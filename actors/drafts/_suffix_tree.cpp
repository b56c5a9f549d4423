// Compiled suffix tree: a path-compressed, depth-limited suffix tree over many token
// sequences (SuffixDecoding semantics), with incremental matchers and best-first draft
// building. Python uses these classes directly (actors.drafts.suffix_tree picks them); they
// implement SuffixTreeLike / MatcherLike of suffix_tree_api.py, where the semantics are
// specified, with the same argument names, and return its SpecResult. The pure-Python
// reference (suffix_tree_py.py) mirrors them exactly.
//
// Layout
// - Every sequence's tokens live in a "store" (a token vector). A node stores a reference
//   (ref_store, ref_start) to one occurrence of its whole string: store[ref_start, +depth).
//   Its edge label is the last edge_len tokens of that string.
// - count(node) = number of (sequence, start) pairs whose stored substring passes through the
//   node. Every string strictly inside an edge has the count of the edge's lower node, so an
//   occurrence that ends (a sequence's current end) always ends at an explicit node.
// - Per sequence, the nodes where its last max_depth - 1 suffixes end ("active" nodes, a ring
//   indexed by start position). Appending token t moves each one step down along t:
//     * a leaf with count 1 is that suffix alone: its edge grows in place (re-pointed to
//       this sequence), no allocation;
//     * else the child along t gets +1 (splitting the edge when it is longer than one token)
//       or a new leaf is made.
// - Removal decrements the counts along every stored suffix of the sequence and frees
//   subtrees that reach 0. Its store stays alive ("zombie") while nodes still point into it;
//   a pass re-points such nodes to a child's occurrence and frees unreferenced stores.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int32_t kRoot = 0;
constexpr int32_t kNone = -1;
constexpr size_t kLinearChildren = 8;

struct Child {
  int32_t token;
  int32_t node;
};

struct Node {
  int32_t count = 0;
  int32_t parent = kNone;
  int32_t depth = 0;
  int32_t edge_len = 0;
  int32_t ref_store = 0;
  int32_t ref_start = 0;
  std::vector<Child> children;  // sorted by token
};

struct Store {
  std::vector<int32_t> toks;
  bool alive = true;   // false once its sequence is removed
  bool freed = false;  // removed and no node points into it: slot reusable
};

struct SeqState {
  int32_t store = 0;
  std::vector<int32_t> active;  // ring of size max_depth, index = start % max_depth
};

// A place in the tree: the string of length `depth` ending on the edge into `node`
// (depth == nodes[node].depth means at the node itself).
struct Pos {
  int32_t node;
  int32_t depth;
};

struct Draft {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  std::vector<double> probs;
};

struct Cand {
  double prob;
  int32_t count;
  int32_t token;
  int32_t parent;
  Pos pos;
};

// Strict "a pops before b": higher probability, then higher count, then smaller token, then
// smaller parent index (the key is unique: a parent never has two children with one token).
inline bool pops_before(const Cand& a, const Cand& b) {
  if (a.prob != b.prob) return a.prob > b.prob;
  if (a.count != b.count) return a.count > b.count;
  if (a.token != b.token) return a.token < b.token;
  return a.parent < b.parent;
}

struct HeapCmp {
  bool operator()(const Cand& a, const Cand& b) const { return pops_before(b, a); }
};

// Converts a Python sequence of ints to tokens in [0, 2**31); ValueError otherwise.
void to_tokens(py::handle obj, std::vector<int32_t>& out) {
  out.clear();
  PyObject* seq = PySequence_Fast(obj.ptr(), "token ids must be a sequence of ints");
  if (seq == nullptr) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(items[i]);
    if (v == -1 && PyErr_Occurred() != nullptr) {
      if (PyErr_ExceptionMatches(PyExc_OverflowError) != 0) {
        PyErr_Clear();
        Py_DECREF(seq);
        throw py::value_error("token ids must be in [0, 2**31)");
      }
      Py_DECREF(seq);
      throw py::error_already_set();
    }
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      Py_DECREF(seq);
      throw py::value_error("token ids must be in [0, 2**31), got " + std::to_string(v));
    }
    out[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  Py_DECREF(seq);
}

void check_draft_args(int max_tokens, int top_k_paths, double min_prob) {
  if (max_tokens < 0) throw py::value_error("max_tokens must be >= 0");
  if (top_k_paths < 1) throw py::value_error("top_k_paths must be >= 1");
  if (!(min_prob >= 0.0 && min_prob <= 1.0)) throw py::value_error("min_prob must be in [0, 1]");
}

class Tree {
 public:
  explicit Tree(int max_depth) : max_depth_(max_depth) {
    if (max_depth < 1) throw py::value_error("max_depth must be >= 1");
    nodes_.emplace_back();  // root
  }

  int max_depth() const { return max_depth_; }
  int64_t num_tokens() const { return num_tokens_; }
  size_t num_sequences() const { return seqs_.size(); }
  int64_t num_nodes() const {
    return static_cast<int64_t>(nodes_.size() - free_nodes_.size()) - 1;  // root excluded
  }

  bool has_sequence(int64_t sid) const { return seqs_.count(sid) != 0; }

  const SeqState& seq(int64_t sid) const {
    auto it = seqs_.find(sid);
    if (it == seqs_.end()) throw py::key_error("unknown sequence id " + std::to_string(sid));
    return it->second;
  }

  const std::vector<int32_t>& tokens_of(int64_t sid) const { return stores_[seq(sid).store].toks; }

  const std::vector<int64_t>& order() const { return order_; }

  void append(int64_t sid, const int32_t* toks, size_t k) {
    auto it = seqs_.find(sid);
    if (it == seqs_.end()) {
      SeqState st;
      st.store = new_store();
      st.active.assign(static_cast<size_t>(max_depth_), kNone);
      it = seqs_.emplace(sid, std::move(st)).first;
      order_.push_back(sid);
    }
    SeqState& sq = it->second;
    const int32_t st = sq.store;
    std::vector<int32_t>& buf = stores_[st].toks;
    if (buf.size() + k > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw py::value_error("sequence too long");
    }
    const int32_t D = max_depth_;
    int32_t* ring = sq.active.data();
    for (size_t j = 0; j < k; ++j) {
      const int32_t t = toks[j];
      const int32_t n = static_cast<int32_t>(buf.size());
      buf.push_back(t);
      // Active suffixes: starts [n - (D - 1), n - 1] (lengths D - 1 .. 1) move one step.
      const int32_t lo = std::max<int32_t>(0, n - (D - 1));
      int32_t slot = lo % D;
      for (int32_t i = lo; i < n; ++i) {
        ring[slot] = step(ring[slot], t, st, i);
        if (++slot == D) slot = 0;
      }
      ring[n % D] = step(kRoot, t, st, n);
    }
    num_tokens_ += static_cast<int64_t>(k);
  }

  void remove(int64_t sid) {
    auto it = seqs_.find(sid);
    if (it == seqs_.end()) throw py::key_error("unknown sequence id " + std::to_string(sid));
    const int32_t st = it->second.store;
    const std::vector<int32_t>& toks = stores_[st].toks;
    const int32_t n = static_cast<int32_t>(toks.size());
    std::vector<int32_t> candidates;  // nodes that may have become mergeable
    for (int32_t i = 0; i < n; ++i) {
      const int32_t len = std::min(max_depth_, n - i);
      int32_t u = kRoot;
      int32_t d = 0;
      while (d < len) {
        Child* slot = find_slot(nodes_[u], toks[i + d]);
        const int32_t c = slot->node;
        Node& C = nodes_[c];
        if (--C.count == 0) {
          erase_child(nodes_[u], toks[i + d]);
          free_subtree(c);
          candidates.push_back(u);
          break;
        }
        d = C.depth;
        u = c;
      }
      if (d == len) candidates.push_back(u);
    }
    for (int32_t u : candidates) {
      if (nodes_[u].count > 0) maybe_merge(u);  // count 0: freed meanwhile
    }
    num_tokens_ -= n;
    stores_[st].alive = false;
    seqs_.erase(it);
    order_.erase(std::find(order_.begin(), order_.end(), sid));
    fix_refs();
  }

  // Walks `p` from the root; false when absent.
  bool walk(const int32_t* p, size_t n, Pos& pos) const {
    int32_t v = kRoot;
    int32_t d = 0;
    const Node* V = &nodes_[kRoot];
    for (size_t k = 0; k < n; ++k) {
      if (d < V->depth) {
        if (tok_at(*V, d) != p[k]) return false;
        ++d;
      } else {
        const int32_t c = find_child(*V, p[k]);
        if (c == kNone) return false;
        v = c;
        V = &nodes_[c];
        d = V->depth - V->edge_len + 1;
      }
    }
    pos = Pos{v, d};
    return true;
  }

  bool has_continuation(Pos pos) const {
    const Node& V = nodes_[pos.node];
    return pos.depth < V.depth || !V.children.empty();
  }

  int32_t count_at(Pos pos) const { return pos.node == kRoot ? 0 : nodes_[pos.node].count; }

  // Calls f(token, count, child_pos) for every one-token continuation of pos.
  template <class F>
  void for_children(Pos pos, F&& f) const {
    const Node& V = nodes_[pos.node];
    if (pos.depth < V.depth) {
      f(tok_at(V, pos.depth), V.count, Pos{pos.node, pos.depth + 1});
      return;
    }
    for (const Child& ch : V.children) {
      const Node& C = nodes_[ch.node];
      f(ch.token, C.count, Pos{ch.node, C.depth - C.edge_len + 1});
    }
  }

  bool valid_match(const int32_t* ctx, size_t n, int L, Pos& pos) const {
    return walk(ctx + n - static_cast<size_t>(L), static_cast<size_t>(L), pos) &&
           has_continuation(pos);
  }

  int match_len(const int32_t* ctx, size_t n, int max_match, Pos* out) const {
    int upper = static_cast<int>(std::min<size_t>(n, static_cast<size_t>(max_match)));
    upper = std::min(upper, max_depth_ - 1);
    Pos pos{kRoot, 0};
    for (int L = upper; L >= 1; --L) {
      if (valid_match(ctx, n, L, pos)) {
        if (out != nullptr) *out = pos;
        return L;
      }
    }
    return 0;
  }

  // Best-first draft from the matched position (see suffix_tree_api.py for the rules).
  void draft(Pos start, int max_tokens, int top_k, double min_prob, Draft& out) const {
    out.tokens.clear();
    out.parents.clear();
    out.probs.clear();
    if (max_tokens == 0) return;
    if (top_k == 1) {
      chain(start, max_tokens, min_prob, out);
      return;
    }
    std::vector<Cand> heap;
    std::vector<char> has_child;
    char root_has_child = 0;
    int leaves = 0;
    auto push_children = [&](Pos pos, double base, int32_t parent) {
      const double pc = static_cast<double>(nodes_[pos.node].count);
      for_children(pos, [&](int32_t tok, int32_t cc, Pos cpos) {
        const double cum = base * (static_cast<double>(cc) / pc);
        if (cum >= min_prob) {
          heap.push_back(Cand{cum, cc, tok, parent, cpos});
          std::push_heap(heap.begin(), heap.end(), HeapCmp{});
        }
      });
    };
    push_children(start, 1.0, kNone);
    while (!heap.empty() && static_cast<int>(out.tokens.size()) < max_tokens) {
      std::pop_heap(heap.begin(), heap.end(), HeapCmp{});
      const Cand c = heap.back();
      heap.pop_back();
      char& ph = c.parent < 0 ? root_has_child : has_child[static_cast<size_t>(c.parent)];
      if (ph != 0) {
        if (leaves >= top_k) continue;
        ++leaves;
      } else if (c.parent < 0) {
        ++leaves;
      }
      ph = 1;
      const int32_t idx = static_cast<int32_t>(out.tokens.size());
      out.tokens.push_back(c.token);
      out.parents.push_back(c.parent);
      out.probs.push_back(c.prob);
      has_child.push_back(0);
      push_children(c.pos, c.prob, idx);
    }
  }

 private:
  void chain(Pos pos, int max_tokens, double min_prob, Draft& out) const {
    double cum = 1.0;
    while (static_cast<int>(out.tokens.size()) < max_tokens) {
      int32_t best_tok = 0;
      int32_t best_cnt = 0;
      Pos best_pos{kNone, 0};
      for_children(pos, [&](int32_t tok, int32_t cc, Pos cpos) {
        if (cc > best_cnt || (cc == best_cnt && tok < best_tok)) {
          best_tok = tok;
          best_cnt = cc;
          best_pos = cpos;
        }
      });
      if (best_pos.node == kNone) return;
      const double p =
          cum * (static_cast<double>(best_cnt) / static_cast<double>(nodes_[pos.node].count));
      if (!(p >= min_prob)) return;
      out.parents.push_back(static_cast<int32_t>(out.tokens.size()) - 1);
      out.tokens.push_back(best_tok);
      out.probs.push_back(p);
      cum = p;
      pos = best_pos;
    }
  }

  int32_t tok_at(const Node& v, int32_t i) const {
    return stores_[static_cast<size_t>(v.ref_store)].toks[static_cast<size_t>(v.ref_start + i)];
  }

  static int32_t find_child(const Node& u, int32_t t) {
    const Child* s = find_slot_c(u, t);
    return s == nullptr ? kNone : s->node;
  }

  static const Child* find_slot_c(const Node& u, int32_t t) {
    const std::vector<Child>& ch = u.children;
    const size_t n = ch.size();
    if (n <= kLinearChildren) {
      for (size_t k = 0; k < n; ++k) {
        if (ch[k].token == t) return &ch[k];
      }
      return nullptr;
    }
    auto it = std::lower_bound(ch.begin(), ch.end(), t,
                               [](const Child& c, int32_t x) { return c.token < x; });
    return (it != ch.end() && it->token == t) ? &*it : nullptr;
  }

  static Child* find_slot(Node& u, int32_t t) { return const_cast<Child*>(find_slot_c(u, t)); }

  static void insert_child(Node& u, int32_t t, int32_t node) {
    auto it = std::lower_bound(u.children.begin(), u.children.end(), t,
                               [](const Child& c, int32_t x) { return c.token < x; });
    u.children.insert(it, Child{t, node});
  }

  static void erase_child(Node& u, int32_t t) {
    auto it = std::lower_bound(u.children.begin(), u.children.end(), t,
                               [](const Child& c, int32_t x) { return c.token < x; });
    u.children.erase(it);
  }

  int32_t new_node() {
    if (!free_nodes_.empty()) {
      const int32_t v = free_nodes_.back();
      free_nodes_.pop_back();
      return v;
    }
    if (nodes_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw std::length_error("suffix tree too large");
    }
    nodes_.emplace_back();
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  int32_t new_store() {
    if (!free_stores_.empty()) {
      const int32_t s = free_stores_.back();
      free_stores_.pop_back();
      stores_[static_cast<size_t>(s)].alive = true;
      stores_[static_cast<size_t>(s)].freed = false;
      return s;
    }
    stores_.emplace_back();
    return static_cast<int32_t>(stores_.size() - 1);
  }

  // Moves the suffix (store st, start i) that ends at node u one token (t) down.
  int32_t step(int32_t u, int32_t t, int32_t st, int32_t i) {
    {
      Node& U = nodes_[u];
      if (U.count == 1 && U.children.empty() && u != kRoot) {
        // A leaf holding only this suffix: grow its edge in place.
        ++U.edge_len;
        ++U.depth;
        U.ref_store = st;
        U.ref_start = i;
        return u;
      }
      Child* slot = find_slot(U, t);
      if (slot != nullptr) {
        const int32_t c = slot->node;
        Node& C = nodes_[c];
        if (C.edge_len == 1) {
          ++C.count;
          maybe_merge(u);
          return c;
        }
        if (u != kRoot && U.children.size() == 1 && U.count == C.count + 1) {
          // Only this suffix ends at u, which has one child along t: slide u down one
          // token (what split + merge would do, without allocating).
          ++U.edge_len;
          ++U.depth;
          --C.edge_len;
          U.ref_store = C.ref_store;
          U.ref_start = C.ref_start;
          U.children[0].token = tok_at(C, U.depth);
          return u;
        }
      } else {
        const int32_t leaf = new_node();
        Node& L = nodes_[leaf];
        Node& U2 = nodes_[u];
        L.count = 1;
        L.parent = u;
        L.depth = U2.depth + 1;
        L.edge_len = 1;
        L.ref_store = st;
        L.ref_start = i;
        insert_child(U2, t, leaf);
        return leaf;
      }
    }
    // Split the edge u -> c after its first token.
    const int32_t w = new_node();
    Node& U = nodes_[u];
    Child* slot = find_slot(U, t);
    const int32_t c = slot->node;
    Node& C = nodes_[c];
    Node& W = nodes_[w];
    W.count = C.count + 1;
    W.parent = u;
    W.depth = U.depth + 1;
    W.edge_len = 1;
    W.ref_store = C.ref_store;
    W.ref_start = C.ref_start;
    W.children.push_back(Child{tok_at(C, W.depth), c});
    C.parent = w;
    --C.edge_len;
    slot->node = w;
    maybe_merge(u);
    return w;
  }

  // Folds u into its only child when no occurrence ends at u any more (equal counts), so
  // explicit nodes stay at branchings and at occurrence ends.
  void maybe_merge(int32_t u) {
    if (u == kRoot) return;
    Node& U = nodes_[u];
    if (U.children.size() != 1) return;
    const int32_t c = U.children[0].node;
    Node& C = nodes_[c];
    if (C.count != U.count) return;
    const int32_t first = tok_at(U, U.depth - U.edge_len);
    C.edge_len += U.edge_len;
    C.parent = U.parent;
    find_slot(nodes_[U.parent], first)->node = c;
    U = Node();
    free_nodes_.push_back(u);
  }

  void free_subtree(int32_t v) {
    std::vector<int32_t> stack{v};
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      Node& X = nodes_[x];
      for (const Child& ch : X.children) stack.push_back(ch.node);
      X = Node();
      free_nodes_.push_back(x);
    }
  }

  // Re-points nodes whose reference lies in a removed sequence's store to a child's
  // occurrence (a child's string extends the node's), then frees unreferenced stores.
  void fix_refs() {
    std::vector<int32_t> refs(stores_.size(), 0);
    // Iterative post-order: children before parents.
    std::vector<std::pair<int32_t, size_t>> stack{{kRoot, 0}};
    while (!stack.empty()) {
      auto& [v, k] = stack.back();
      Node& V = nodes_[v];
      if (k < V.children.size()) {
        const int32_t c = V.children[k].node;
        ++k;
        stack.emplace_back(c, 0);
        continue;
      }
      if (v != kRoot) {
        if (!stores_[static_cast<size_t>(V.ref_store)].alive) {
          for (const Child& ch : V.children) {
            const Node& C = nodes_[ch.node];
            if (stores_[static_cast<size_t>(C.ref_store)].alive) {
              V.ref_store = C.ref_store;
              V.ref_start = C.ref_start;
              break;
            }
          }
        }
        ++refs[static_cast<size_t>(V.ref_store)];
      }
      stack.pop_back();
    }
    for (size_t s = 0; s < stores_.size(); ++s) {
      Store& S = stores_[s];
      if (!S.alive && !S.freed && refs[s] == 0) {
        std::vector<int32_t>().swap(S.toks);
        S.freed = true;
        free_stores_.push_back(static_cast<int32_t>(s));
      }
    }
  }

  int32_t max_depth_;
  int64_t num_tokens_ = 0;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  std::vector<Store> stores_;
  std::vector<int32_t> free_stores_;
  std::unordered_map<int64_t, SeqState> seqs_;
  std::vector<int64_t> order_;
};

// SpecResult of suffix_tree_api.py (a frozen, slotted dataclass), looked up on first use: an
// import while this module initialises would re-enter the package's import. Results fill its
// slots the way its own __init__ does (object.__setattr__) without running that Python
// __init__, which would cost about as much as the draft itself; the lookup checks that the
// fields are still these five.
constexpr const char* kSpecResultFields[5] = {"token_ids", "parents", "probs", "score",
                                              "match_len"};
PyTypeObject* spec_result_type = nullptr;  // with the interned field names: kept for good
PyObject* spec_result_names[5];

void load_spec_result() {
  py::object cls = py::module_::import("actors.drafts.suffix_tree_api").attr("SpecResult");
  py::tuple expect(5);
  for (size_t i = 0; i < 5; ++i) expect[i] = py::str(kSpecResultFields[i]);
  if (!expect.equal(cls.attr("__slots__"))) {
    throw py::type_error("SpecResult's fields changed: update _suffix_tree.cpp");
  }
  for (size_t i = 0; i < 5; ++i) {
    spec_result_names[i] = PyUnicode_InternFromString(kSpecResultFields[i]);
    if (spec_result_names[i] == nullptr) throw py::error_already_set();
  }
  spec_result_type = reinterpret_cast<PyTypeObject*>(cls.release().ptr());
}

py::object make_result(const Draft& d, int match_len) {
  if (spec_result_type == nullptr) load_spec_result();
  const size_t n = d.tokens.size();
  py::object fields[5] = {
      py::reinterpret_steal<py::object>(PyTuple_New(static_cast<Py_ssize_t>(n))),
      py::reinterpret_steal<py::object>(PyTuple_New(static_cast<Py_ssize_t>(n))),
      py::reinterpret_steal<py::object>(PyTuple_New(static_cast<Py_ssize_t>(n))), {}, {}};
  for (size_t f = 0; f < 3; ++f) {
    if (!fields[f]) throw py::error_already_set();
  }
  double score = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const auto k = static_cast<Py_ssize_t>(i);
    PyTuple_SET_ITEM(fields[0].ptr(), k, PyLong_FromLong(d.tokens[i]));
    PyTuple_SET_ITEM(fields[1].ptr(), k, PyLong_FromLong(d.parents[i]));
    PyTuple_SET_ITEM(fields[2].ptr(), k, PyFloat_FromDouble(d.probs[i]));
    score += d.probs[i];
  }
  fields[3] = py::float_(score);
  fields[4] = py::int_(match_len);
  PyTypeObject* type = spec_result_type;
  auto out = py::reinterpret_steal<py::object>(type->tp_alloc(type, 0));
  if (!out) throw py::error_already_set();
  for (size_t f = 0; f < 5; ++f) {
    if (PyObject_GenericSetAttr(out.ptr(), spec_result_names[f], fields[f].ptr()) != 0) {
      throw py::error_already_set();
    }
  }
  return out;
}

class Matcher {
 public:
  Matcher(Tree* tree, int max_match, int slack) : tree_(tree), max_match_(max_match), slack_(slack) {
    if (max_match < 0) throw py::value_error("max_match must be >= 0");
    if (slack < 0) throw py::value_error("slack must be >= 0");
  }

  void feed(py::handle tokens) {
    to_tokens(tokens, scratch_);
    const size_t k = scratch_.size();
    buf_.insert(buf_.end(), scratch_.begin(), scratch_.end());
    const size_t keep = static_cast<size_t>(max_match_);
    if (buf_.size() > 2 * keep + 64) buf_.erase(buf_.begin(), buf_.end() - static_cast<long>(keep));
    total_ += static_cast<int64_t>(k);
    int64_t c = static_cast<int64_t>(m_) + static_cast<int64_t>(k) + slack_;
    c = std::min<int64_t>(c, max_match_);
    c = std::min<int64_t>(c, total_);
    c = std::min<int64_t>(c, tree_->max_depth() - 1);
    m_ = 0;
    Pos pos{kRoot, 0};
    for (int L = static_cast<int>(c); L >= 1; --L) {
      if (tree_->valid_match(buf_.data(), buf_.size(), L, pos)) {
        m_ = L;
        break;
      }
    }
  }

  int match_len() const { return m_; }

  void reset() {
    buf_.clear();
    total_ = 0;
    m_ = 0;
  }

  py::object speculate(int max_tokens, int top_k_paths, double min_prob) {
    check_draft_args(max_tokens, top_k_paths, min_prob);
    Pos pos{kRoot, 0};
    int L = std::min(m_, tree_->max_depth() - 1);
    for (; L >= 1; --L) {
      if (tree_->valid_match(buf_.data(), buf_.size(), L, pos)) break;
    }
    m_ = L;
    if (L > 0) {
      tree_->draft(pos, max_tokens, top_k_paths, min_prob, draft_);
    } else {
      draft_.tokens.clear();
      draft_.parents.clear();
      draft_.probs.clear();
    }
    return make_result(draft_, L);
  }

 private:
  Tree* tree_;
  int max_match_;
  int slack_;
  int m_ = 0;
  int64_t total_ = 0;
  std::vector<int32_t> buf_;
  std::vector<int32_t> scratch_;
  Draft draft_;
};

py::list to_list(const std::vector<int32_t>& v) {
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(v.size()));
  if (out == nullptr) throw py::error_already_set();
  for (size_t i = 0; i < v.size(); ++i) {
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), PyLong_FromLong(v[i]));
  }
  return py::reinterpret_steal<py::list>(out);
}

}  // namespace

PYBIND11_MODULE(_suffix_tree, m) {
  m.doc() = "Compiled suffix tree (see actors.drafts.suffix_tree_api for the interface).";

  py::class_<Tree>(m, "SuffixTree")
      .def(py::init<int>(), py::arg("max_depth") = 64)
      .def_property_readonly("max_depth", &Tree::max_depth)
      .def_property_readonly("num_tokens", &Tree::num_tokens)
      .def_property_readonly("num_sequences", &Tree::num_sequences)
      .def_property_readonly("num_nodes", &Tree::num_nodes)
      .def(
          "append",
          [](Tree& t, int64_t sid, py::handle tokens) {
            thread_local std::vector<int32_t> buf;
            to_tokens(tokens, buf);
            t.append(sid, buf.data(), buf.size());
          },
          py::arg("seq_id"), py::arg("token_ids"))
      .def("remove", &Tree::remove, py::arg("seq_id"))
      .def("has_sequence", &Tree::has_sequence, py::arg("seq_id"))
      .def(
          "seq_len", [](const Tree& t, int64_t sid) { return t.tokens_of(sid).size(); },
          py::arg("seq_id"))
      .def(
          "tokens", [](const Tree& t, int64_t sid) { return to_list(t.tokens_of(sid)); },
          py::arg("seq_id"))
      .def("seq_ids",
           [](const Tree& t) {
             py::list out;
             for (int64_t sid : t.order()) out.append(py::int_(sid));
             return out;
           })
      .def(
          "count",
          [](const Tree& t, py::handle pattern) -> int64_t {
            std::vector<int32_t> p;
            to_tokens(pattern, p);
            if (p.empty() || static_cast<int>(p.size()) > t.max_depth()) {
              throw py::value_error("pattern length must be in [1, max_depth]");
            }
            Pos pos{kRoot, 0};
            return t.walk(p.data(), p.size(), pos) ? t.count_at(pos) : 0;
          },
          py::arg("pattern"))
      .def(
          "continuations",
          [](const Tree& t, py::handle pattern) {
            std::vector<int32_t> p;
            to_tokens(pattern, p);
            py::dict out;
            Pos pos{kRoot, 0};
            if (static_cast<int>(p.size()) >= t.max_depth() || !t.walk(p.data(), p.size(), pos)) {
              return out;
            }
            t.for_children(pos, [&](int32_t tok, int32_t cc, Pos) { out[py::int_(tok)] = cc; });
            return out;
          },
          py::arg("pattern"))
      .def(
          "match_len",
          [](const Tree& t, py::handle context, int max_match) {
            if (max_match < 0) throw py::value_error("max_match must be >= 0");
            std::vector<int32_t> c;
            to_tokens(context, c);
            return t.match_len(c.data(), c.size(), max_match, nullptr);
          },
          py::arg("context"), py::arg("max_match"))
      .def(
          "speculate",
          [](const Tree& t, py::handle context, int max_tokens, int top_k_paths, double min_prob,
             int max_match) {
            check_draft_args(max_tokens, top_k_paths, min_prob);
            if (max_match < 0) throw py::value_error("max_match must be >= 0");
            std::vector<int32_t> c;
            to_tokens(context, c);
            Pos pos{kRoot, 0};
            const int L = t.match_len(c.data(), c.size(), max_match, &pos);
            Draft d;
            if (L > 0) t.draft(pos, max_tokens, top_k_paths, min_prob, d);
            return make_result(d, L);
          },
          py::arg("context"), py::kw_only(), py::arg("max_tokens"), py::arg("top_k_paths") = 1,
          py::arg("min_prob") = 0.1, py::arg("max_match") = 32)
      .def(
          "matcher",
          [](Tree& t, int max_match, int slack) { return new Matcher(&t, max_match, slack); },
          py::arg("max_match") = 32, py::arg("slack") = 8, py::keep_alive<0, 1>(),
          py::return_value_policy::take_ownership);

  py::class_<Matcher>(m, "Matcher")
      .def("feed", &Matcher::feed, py::arg("token_ids"))
      .def_property_readonly("match_len", &Matcher::match_len)
      .def("speculate", &Matcher::speculate, py::kw_only(), py::arg("max_tokens"),
           py::arg("top_k_paths") = 1, py::arg("min_prob") = 0.1)
      .def("reset", &Matcher::reset);
}
