// A posted-price design's held choices (posted_book.hpp): what a round reads and checks before it
// changes anything, and held.py's HeldChoices.follow, hold and drop, in their orders; the rounds
// decided over them are in posted_rounds.cpp.
#include "posted_book.hpp"

#include <nanobind/stl/vector.h>

#include <algorithm>
#include <limits>

#include "bindings.hpp"
#include "gc_slots.hpp"
#include "py_calls.hpp"
#include "request_slots.hpp"
#include "slot_pool.hpp"

namespace posted {

using namespace request_slots;

namespace {

// The id of a Request (false for another object, or an id that is not a plain int).
bool request_id(PyObject* o, int64_t& id) {
    const Fields& f = fields();
    return f.type != nullptr && Py_TYPE(o) == f.type && plain_int(at_offset(o, f.id), id);
}

// A request's fields as held.py reads them, where each is plain: exact ints, exact floats and an
// int64 token array (its size is prompt_len).
bool read_fresh(PyObject* o, Fresh& out) {
    const Fields& f = fields();
    if (f.type == nullptr || Py_TYPE(o) != f.type) return false;
    PyObject *id = at_offset(o, f.id), *bidder = at_offset(o, f.bidder);
    PyObject *urgency = at_offset(o, f.urgency), *bid = at_offset(o, f.bid), *tokens = at_offset(o, f.tokens);
    if (!plain_int(id, out.id) || !plain_int(bidder, out.bidder) || urgency == nullptr || bid == nullptr ||
        tokens == nullptr || !PyFloat_CheckExact(urgency) || !PyFloat_CheckExact(bid))
        return false;
    if (pycall::int64_buffer(tokens, &out.length) == nullptr) return false;
    out.request = o, out.id_obj = id, out.bidder_obj = bidder;
    out.urgency = PyFloat_AS_DOUBLE(urgency), out.bid = PyFloat_AS_DOUBLE(bid);
    return true;
}

}  // namespace

nb::object bill(PyObject* bidder, double amount) {
    nb::object value = nb::steal(PyFloat_FromDouble(amount));
    if (!value.is_valid()) throw nb::python_error();
    return nb::make_tuple(nb::handle(bidder), value);
}

Book::Book(int choices, std::vector<double> prices, double seconds)
    : choices_(choices), prices_(std::move(prices)), seconds_(seconds) {}

bool Book::in_range(const Round& r, int64_t bidder) const {
    return (!r.market || (bidder >= 0 && size_t(bidder) < r.alpha.size())) &&
           (!r.budgets || (bidder >= 0 && size_t(bidder) < r.left.size()));
}

// held.py's HeldChoices._leads_to: 1 or 0, or -1 where a request it reads is not plain.
int Book::leads_to(Round& r, nb::handle joined, nb::handle left) const {
    if (!PyList_CheckExact(joined.ptr()) || !PyList_CheckExact(left.ptr())) return -1;
    const Py_ssize_t n = Py_ssize_t(r.queue.size()), j = PyList_GET_SIZE(joined.ptr()), l = PyList_GET_SIZE(left.ptr());
    if (size_ - l + j != n) return 0;
    std::vector<int32_t> gone;
    for (Py_ssize_t i = 0; i < l; ++i) {
        PyObject* x = PyList_GET_ITEM(left.ptr(), i);
        int64_t id;
        if (!request_id(x, id)) return -1;
        auto it = by_id_.find(id);
        if (it == by_id_.end() || slots_[size_t(it->second)].request.ptr() != x) return 0;
        gone.push_back(it->second);
    }
    r.fresh.resize(size_t(j));
    for (Py_ssize_t i = 0; i < j; ++i) {
        if (!read_fresh(PyList_GET_ITEM(joined.ptr(), i), r.fresh[size_t(i)])) return -1;
        if (by_id_.count(r.fresh[size_t(i)].id)) return 0;
    }
    if (j > n) return 0;
    std::vector<int32_t> distinct(gone);
    std::sort(distinct.begin(), distinct.end());
    if (std::adjacent_find(distinct.begin(), distinct.end()) != distinct.end()) return 0;
    // Each request before the joined ones held and not left: read along the held order first (an
    // engine's queue keeps it), by identity from the first that differs.
    Py_ssize_t i = 0;
    for (int32_t s = first_; s >= 0 && i < n - j; s = slots_[size_t(s)].next) {
        if (std::binary_search(distinct.begin(), distinct.end(), s)) continue;
        if (slots_[size_t(s)].request.ptr() != r.queue[size_t(i)]) break;
        r.at[size_t(i++)] = s;
    }
    for (; i < n - j; ++i) {
        auto it = by_obj_.find(r.queue[size_t(i)]);
        if (it == by_obj_.end() || std::binary_search(distinct.begin(), distinct.end(), it->second)) return 0;
        r.at[size_t(i)] = it->second;
    }
    for (Py_ssize_t i = 0; i < j; ++i) {
        if (r.queue[size_t(n - j + i)] != r.fresh[size_t(i)].request) return 0;
        r.fresh_at.push_back(int32_t(n - j + i));
    }
    r.gone = std::move(gone);
    return 1;
}

// held.py's HeldChoices._compare, read: false where a request of the queue is not plain, or
// two share an id.
bool Book::compared(Round& r) const {
    const size_t n = r.queue.size();
    std::vector<int64_t> ids(n);
    std::unordered_map<int64_t, int32_t> present;
    present.reserve(n);
    for (size_t i = 0; i < n; ++i)
        if (!request_id(r.queue[i], ids[i]) || !present.emplace(ids[i], int32_t(i)).second) return false;
    for (int32_t s = first_; s >= 0; s = slots_[size_t(s)].next)
        if (!present.count(slots_[size_t(s)].id)) r.gone.push_back(s);
    r.fresh.clear();
    for (size_t i = 0; i < n; ++i) {
        auto it = by_id_.find(ids[i]);
        if (it != by_id_.end() && slots_[size_t(it->second)].request.ptr() == r.queue[i]) {
            r.at[i] = it->second;
            continue;
        }
        Fresh f;
        if (!read_fresh(r.queue[i], f)) return false;
        if (it == by_id_.end()) {
            r.fresh.push_back(f);
            r.fresh_at.push_back(int32_t(i));
        } else {
            r.swap.emplace_back(it->second, f);  // another object under a held id holds what the id held
        }
    }
    return true;
}

bool Book::read(Round& r, nb::handle queue, nb::handle joined, nb::handle left, nb::handle cache,
                nb::handle multipliers, nb::handle remaining) {
    if (fields().type == nullptr || !PyList_CheckExact(queue.ptr())) return false;
    r.market = !multipliers.is_none();
    r.budgets = !remaining.is_none();
    if ((r.market && !plain_floats(multipliers, r.alpha)) || (r.budgets && !plain_floats(remaining, r.left)))
        return false;
    // The requests read are kept alive by this call's own tuples: nothing here runs a policy's code,
    // but an allocation may run the garbage collector's.
    nb::object copy = nb::steal(PyList_AsTuple(queue.ptr()));
    if (!copy.is_valid()) throw nb::python_error();
    r.keep = copy;
    const Py_ssize_t n = PyTuple_GET_SIZE(copy.ptr());
    r.queue.assign(&PyTuple_GET_ITEM(copy.ptr(), 0), &PyTuple_GET_ITEM(copy.ptr(), 0) + n);
    r.at.assign(size_t(n), -1);
    if (!joined.is_none() && cache.ptr() == cache_.ptr()) {
        const int follows = leads_to(r, joined, left);
        if (follows < 0) return false;
        r.follows = follows == 1;
    }
    if (!r.follows) {
        r.fresh_at.clear();
        r.at.assign(size_t(n), -1);
        if (!compared(r)) return false;
    }
    // A new request's bid as round_bids makes it, which check_bids refuses where it is NaN, < 0 or
    // inf (a field changed after construction, or a product that overflows): Python names it.
    for (const Fresh& f : r.fresh) {
        if (!in_range(r, f.bidder)) return false;
        const double b = r.market ? r.alpha[size_t(f.bidder)] * f.urgency : f.bid;
        if (!(0.0 <= b && b < std::numeric_limits<double>::infinity())) return false;
    }
    for (const auto& swapped : r.swap)
        if (!in_range(r, swapped.second.bidder)) return false;
    // Every request held may weigh, and be read, once the bids change kind (a replay's own or not);
    // then its other stored field becomes its weight, which check_bids has not seen: Python names
    // one that is NaN, < 0 or inf, as it names a new request's.
    const bool every = r.market == replay_;
    for (int32_t s = first_; s >= 0; s = slots_[size_t(s)].next) {
        const Slot& x = slots_[size_t(s)];
        if ((every || x.rank >= 0) && !in_range(r, x.bidder)) return false;
        if (every) {
            const double b = r.market ? r.alpha[size_t(x.bidder)] * x.urgency : x.bid;
            if (!(0.0 <= b && b < std::numeric_limits<double>::infinity())) return false;
        }
    }
    return true;
}

void Book::hold(const Fresh& f, int k) {
    const int32_t s = take_slot(slots_, free_slots_);
    Slot& x = slots_[size_t(s)];
    x.request = nb::borrow(f.request), x.id_obj = nb::borrow(f.id_obj), x.bidder_obj = nb::borrow(f.bidder_obj);
    x.id = f.id, x.bidder = f.bidder, x.length = f.length, x.urgency = f.urgency, x.bid = f.bid;
    x.choice = k, x.rank = -1, x.cls = -1, x.holding = -1, x.bill = nb::object();
    x.prev = last_, x.next = -1;
    (last_ >= 0 ? slots_[size_t(last_)].next : first_) = s;
    last_ = s, ++size_;
    by_id_[f.id] = s;
    by_obj_[f.request] = s;
    const double w = weight(x);
    if (!(w > 0)) return;
    x.rank = k;
    auto found = holding_of_.find(f.bidder);
    int32_t h;
    if (found != holding_of_.end()) {
        h = found->second;
    } else {
        h = take_slot(holdings_, free_holdings_);
        Holding& fresh = holdings_[size_t(h)];
        fresh = Holding{};
        fresh.bidder_obj = nb::borrow(f.bidder_obj), fresh.bidder = f.bidder;
        fresh.count.assign(size_t(choices_), 0), fresh.tokens.assign(size_t(choices_), 0);
        fresh.prev = hlast_;
        (hlast_ >= 0 ? holdings_[size_t(hlast_)].next : hfirst_) = h;
        hlast_ = h;
        holding_of_[f.bidder] = h;
    }
    Holding& b = holdings_[size_t(h)];
    x.holding = h, x.mprev = b.last, x.mnext = -1;
    (b.last >= 0 ? slots_[size_t(b.last)].mnext : b.first) = s;
    b.last = s, ++b.size;
    ++b.count[size_t(k)];
    b.tokens[size_t(k)] += f.length;
    if (!prices_.empty()) x.bill = bill(f.bidder_obj, prices_[size_t(k)] * double(f.length));
    b.shortest = std::min(b.shortest, f.length);
}

int Book::drop(int32_t s) {
    Slot& x = slots_[size_t(s)];
    const int k = x.choice;
    (x.prev >= 0 ? slots_[size_t(x.prev)].next : first_) = x.next;
    (x.next >= 0 ? slots_[size_t(x.next)].prev : last_) = x.prev;
    --size_;
    by_id_.erase(x.id);
    by_obj_.erase(x.request.ptr());
    if (x.rank >= 0) {
        Holding& b = holdings_[size_t(x.holding)];
        (x.mprev >= 0 ? slots_[size_t(x.mprev)].mnext : b.first) = x.mnext;
        (x.mnext >= 0 ? slots_[size_t(x.mnext)].mprev : b.last) = x.mprev;
        if (--b.size == 0) {
            (b.prev >= 0 ? holdings_[size_t(b.prev)].next : hfirst_) = b.next;
            (b.next >= 0 ? holdings_[size_t(b.next)].prev : hlast_) = b.prev;
            holding_of_.erase(b.bidder);
            b.bidder_obj = nb::object();
            free_holdings_.push_back(x.holding);
        } else {
            --b.count[size_t(k)];
            b.tokens[size_t(k)] -= x.length;
        }
    }
    x.request = x.id_obj = x.bidder_obj = x.bill = nb::object();
    free_slots_.push_back(s);
    return k;
}

// HeldChoices.follow on what `read` found: a change of bid kind holds every request again, then
// those gone are dropped and another object under a held id takes its place.
void Book::follow(Round& r, nb::handle cache, bool replay) {
    if (replay != replay_) {
        replay_ = replay;
        std::vector<int32_t> order;
        for (int32_t s = first_; s >= 0; s = slots_[size_t(s)].next) order.push_back(s);
        for (int32_t s : order) {
            const Slot& x = slots_[size_t(s)];
            nb::object request = x.request, id = x.id_obj, bidder = x.bidder_obj;  // alive past the drop
            Fresh f{request.ptr(), id.ptr(), bidder.ptr(), x.id, x.bidder, x.length, x.urgency, x.bid};
            const int k = drop(s);
            hold(f, k);
        }
    }
    cache_ = nb::borrow(cache);
    for (int32_t s : r.gone) drop(s);
    for (const auto& swapped : r.swap) hold(swapped.second, drop(swapped.first));
}

// The fields each request joined with go along: Python reads a held request's weights, bidder and
// prompt length from them, never from the request again (held.py), so a field changed while it
// waits moves neither core.
nb::tuple Book::held() const {
    nb::list entries;
    for (int32_t s = first_; s >= 0; s = slots_[size_t(s)].next) {
        const Slot& x = slots_[size_t(s)];
        entries.append(nb::make_tuple(x.request, x.choice, x.urgency, x.bid, x.bidder_obj, x.length));
    }
    return nb::make_tuple(entries, replay_, cache_);
}

void Book::release() {
    slots_.clear(), free_slots_.clear(), holdings_.clear(), free_holdings_.clear();
    by_id_.clear(), by_obj_.clear(), holding_of_.clear();
    first_ = last_ = hfirst_ = hlast_ = -1, size_ = 0;
    cache_ = nb::none();
}

}  // namespace posted

void bind_posted_book(nanobind::module_& m) {
    namespace nb = nanobind;
    using posted::Book;
    nb::class_<Book>(m, "PostedBook",
                     "The choices a posted-price design's waiting requests hold (pricing/held.py) and its "
                     "rounds over them, for plain inputs.",
                     nb::type_slots(gc_slots<Book>))
        .def(nb::init<int, std::vector<double>, double>(), nb::arg("choices"), nb::arg("prices"), nb::arg("seconds"))
        .def("tiers_round", &Book::tiers_round, nb::arg("queue"), nb::arg("joined").none(), nb::arg("left").none(),
             nb::arg("cache").none(), nb::arg("multipliers").none(), nb::arg("remaining").none(),
             nb::arg("lens").none(), "ServiceTiers' round: (order, bills), or None for inputs not plain.")
        .def("congestion_round", &Book::congestion_round, nb::arg("queue"), nb::arg("joined").none(),
             nb::arg("left").none(), nb::arg("cache").none(), nb::arg("multipliers").none(), nb::arg("price"),
             "CongestionPricing's round at `price`: (order, bills, bought), or None for inputs not plain.")
        .def("held", &Book::held,
             "([(request, choice, urgency, bid, bidder, prompt_len)] in the held order, each field as the request "
             "joined, replay, cache): HeldChoices' state.");
}
