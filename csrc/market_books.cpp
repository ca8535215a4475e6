// The market's per-step bookkeeping over requests and bidders (auction_gym/market/market.py;
// docs/design.md section 8): the latency cost each bidder's requests accrue in a step
// (`Market._accrued`) and every bidder's observation row (`Market.observations`).
//
// Bit-identical to the Python: the same double operations in the same order, the rows rounded to
// float32 as struct.pack rounds them and clipped as numpy's maximum and minimum clip (NaN passes,
// a bound equal to the value wins). They read the requests' and records' fields as Python's
// interpreter does (`Field`); a value Python would treat otherwise (not an exact float or int, a
// bidder out of range, a division by zero or a log1p out of its domain, where Python raises)
// makes them answer None without changing anything, and the market runs the Python code instead.
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <unordered_map>
#include <vector>

#include "bindings.hpp"
#include "engine.hpp"
#include "market_fields.hpp"

namespace nb = nanobind;

namespace {

using market_fields::array_of;
using market_fields::as_double;
using market_fields::as_int;
using market_fields::doubles;
using market_fields::Field;
using market_fields::index_of;
using market_fields::Unsupported;

// Python's math.log1p, where it answers (it raises on x <= -1: a domain error).
double log1p_checked(double x) {
    if (x <= -1.0) throw Unsupported{};
    return x == 0.0 ? x : std::log1p(x);  // CPython's _Py_log1p keeps the sign of zero itself
}

double divide(double a, double b) {
    if (b == 0.0) throw Unsupported{};  // ZeroDivisionError in Python
    return a / b;
}

// `Market._accrued`'s state and loop: when each request's accrual last stopped (`_accrued_to`).
// The requests held are those of `in_system`'s list, or, on the compiled engine, read off it in
// that order without a list (`Engine::for_each_held`, docs/engine.md section 8). A request's
// arrival is read only where the Python reads it: for one whose accrual starts in the step.
//
// Each held request's id, bidder and urgency, where all three are slots, are read once and kept
// (`Reading`) with the objects its slots held, which the reading keeps alive: a later step finds
// the reading by the request's address and takes it while the slots hold those same objects (an
// int or float object is its value for as long as it lives), and reads the fields again where
// anything changed, the request's address reused included. The reading also points at the
// request's accrual, so a step looks nothing up by id for a request it met before.
class LatencyAccrual {
public:
    LatencyAccrual(size_t n, double start) : n_(n), start_(start) {}

    nb::object accrue(nb::handle finished, nb::handle records, nb::handle held, double end) {
        try {
            read_finished(finished, records);
            read_held(held);
        } catch (const Unsupported &) {
            return nb::none();
        }
        cost_.assign(n_, 0.0);
        for (const Finished &f : done_) {
            auto it = since_.find(f.id);
            double t = f.arrival > start_ ? f.arrival : start_;  // Python's max(start, arrival)
            if (it != since_.end()) {
                t = it->second.t;
                forget(it);
            }
            cost_[f.bidder] += f.urgency * (f.finish - t);
        }
        for (const Held &h : held_) {
            Since *since = h.since ? h.since : &start_accrual(h);
            cost_[h.bidder] += h.urgency * (end - since->t);
            since->t = end;
        }
        return array_of(cost_);
    }

    // The accrual's state as the Python market keeps it, {request id: time}, to go on in Python.
    nb::dict accrued_to() const {
        nb::dict out;
        for (const auto &[id, since] : since_) out[nb::int_(id)] = nb::float_(since.t);
        return out;
    }

private:
    // A request's accrual: when it last stopped, and the address of the request whose reading
    // points here (null: none), so that reading goes when the accrual does.
    struct Since {
        double t;
        PyObject *reader = nullptr;
    };
    using SinceMap = std::unordered_map<int64_t, Since>;  // no insertion moves an entry
    // A held request's slots as last read: the objects (kept alive) and their values.
    struct Reading {
        nb::object id, bidder, urgency;
        int64_t rid;
        size_t bidder_index;
        double urgency_value;
        Since *since = nullptr;  // its accrual, where linked (`link`)
    };
    // A request held: `since` its accrual where it has one and did not finish in the step, else
    // null and its `arrival` read.
    struct Held {
        int64_t id;
        size_t bidder;
        double urgency, arrival;
        Since *since;
        PyObject *request;
    };
    struct Finished {
        int64_t id;
        size_t bidder;
        double urgency, arrival, finish;
    };

    void read_finished(nb::handle finished, nb::handle records) {
        if (!PyList_CheckExact(finished.ptr()) || !PyDict_CheckExact(records.ptr())) throw Unsupported{};
        done_.clear();
        for (Py_ssize_t i = 0, k = PyList_GET_SIZE(finished.ptr()); i < k; ++i) {
            PyObject *rid = PyList_GET_ITEM(finished.ptr(), i);
            PyObject *rec = PyDict_GetItemWithError(records.ptr(), rid);  // borrowed
            if (!rec) {
                PyErr_Clear();
                throw Unsupported{};
            }
            done_.push_back({as_int(rid), index_of(record_bidder_.as_int_of(rec), n_),
                             record_urgency_.as_double_of(rec), record_arrival_.as_double_of(rec),
                             record_finish_.as_double_of(rec)});
        }
    }

    // `held`: the list `in_system` returned, or the compiled engine itself.
    void read_held(nb::handle held) {
        held_.clear();
        if (engine::Engine *e = nullptr; nb::try_cast<engine::Engine *>(held, e) && e) {
            e->for_each_held([this](PyObject *r) {
                // A field read through getattr may run Python code: the list keeps that code's reads.
                if (!read(r)) throw Unsupported{};
            });
            return;
        }
        if (!PyList_CheckExact(held.ptr())) throw Unsupported{};
        for (Py_ssize_t i = 0, k = PyList_GET_SIZE(held.ptr()); i < k; ++i) read(PyList_GET_ITEM(held.ptr(), i));
    }

    // Reads held `r`: whether every field it read was in place (a slot). A request met before
    // whose accrual goes on needs nothing more than its reading.
    bool read(PyObject *r) {
        Reading *reading = reading_of(r);
        if (reading && reading->since && !finishing(reading->rid)) {
            held_.push_back({reading->rid, reading->bidder_index, reading->urgency_value, 0.0, reading->since, r});
            return true;
        }
        return read_anew(r, reading);
    }

    // Whether request `rid` finished in the step: its accrual goes first (a list may hold it too).
    bool finishing(int64_t rid) const {
        bool found = false;
        for (const Finished &f : done_) found = found || f.id == rid;
        return found;
    }

    // `read` of a request new in the step (or whose fields changed, or not slots, or finishing).
    bool read_anew(PyObject *r, Reading *reading) {
        Held h{0, 0, 0.0, 0.0, nullptr, r};
        bool in_place = reading != nullptr;
        if (reading) {
            h.id = reading->rid, h.bidder = reading->bidder_index, h.urgency = reading->urgency_value;
            h.since = reading->since;
        } else {
            h.id = id_.as_int_of(r), h.bidder = index_of(bidder_.as_int_of(r), n_);
            h.urgency = urgency_.as_double_of(r);
            in_place = id_.in_place() && bidder_.in_place() && urgency_.in_place();
        }
        if (finishing(h.id)) {
            h.since = nullptr;
        } else if (!h.since) {
            if (auto it = since_.find(h.id); it != since_.end()) {
                h.since = &it->second;
                if (reading) link(r, *reading, it->second);
            }
        }
        if (!h.since) {
            h.arrival = arrival_.as_double_of(r);
            in_place = in_place && arrival_.in_place();
        }
        held_.push_back(h);
        return in_place;
    }

    // Held `r`'s reading: the last one where its slots hold the objects read then, else a new one;
    // null where its id, bidder and urgency are not all slots (each is then read as Python reads it).
    Reading *reading_of(PyObject *r) {
        PyObject *slots[3];
        if (!request_slots_.read(r, slots)) return nullptr;
        Reading *last = readings_.find(r);
        if (last && last->id.ptr() == slots[0] && last->bidder.ptr() == slots[1] && last->urgency.ptr() == slots[2])
            return last;
        if (!slots[0] || !slots[1] || !slots[2]) return nullptr;  // unset: read as Python reads it, which raises
        return &readings_.insert(r, Reading{nb::borrow(slots[0]), nb::borrow(slots[1]), nb::borrow(slots[2]),
                                            as_int(slots[0]), index_of(as_int(slots[1]), n_), as_double(slots[2])});
    }

    // The accrual of a request new in the step, from its arrival or the episode's start, unless an
    // earlier entry of the list was this request.
    Since &start_accrual(const Held &h) {
        Since &since = since_.try_emplace(h.id, Since{h.arrival > start_ ? h.arrival : start_}).first->second;
        if (Reading *reading = readings_.find(h.request); reading && reading->rid == h.id)
            link(h.request, *reading, since);
        return since;
    }

    // The reading at `request` points at `since` from now on, the one that pointed there before no longer.
    void link(PyObject *request, Reading &reading, Since &since) {
        if (since.reader && since.reader != request)
            if (Reading *other = readings_.find(since.reader); other && other->since == &since) other->since = nullptr;
        since.reader = request;
        reading.since = &since;
    }

    // A finished request's accrual ends, and its reading with it.
    void forget(SinceMap::iterator it) {
        PyObject *request = it->second.reader;
        if (Reading *reading = readings_.find(request); reading && reading->since == &it->second)
            readings_.erase(request);
        since_.erase(it);
    }

    size_t n_;
    double start_;
    SinceMap since_;
    market_fields::AddressTable<Reading> readings_;
    std::vector<Finished> done_;  // the step's, kept for their capacity
    std::vector<Held> held_;
    std::vector<double> cost_;
    Field id_{"id"}, bidder_{"bidder"}, urgency_{"urgency"}, arrival_{"arrival"};  // of requests
    market_fields::SlotGroup<3> request_slots_{{&id_, &bidder_, &urgency_}};
    Field record_bidder_{"bidder"}, record_urgency_{"urgency"}, record_arrival_{"arrival"}, record_finish_{"finish"};
};

// `Market.observations`' rows, given the scales of auction_gym/market/observation.py and the
// features' bounds, in the order of market.py's `_ROW` (the vector's).
class ObservationRows {
public:
    static constexpr size_t SIZE = 12;

    ObservationRows(size_t n, int64_t pacing_rounds, double alpha_max, double queue_scale, double total_queue_scale,
                    double urgency_log_scale, double latency_scale, double ttft_scale, std::vector<double> low,
                    std::vector<double> high)
        : n_(n), T_(pacing_rounds), alpha_max_(alpha_max), queue_scale_(queue_scale),
          total_queue_scale_(total_queue_scale), urgency_log_scale_(urgency_log_scale), latency_scale_(latency_scale),
          ttft_scale_(ttft_scale) {
        if (low.size() != SIZE || high.size() != SIZE)
            throw nb::value_error("ObservationRows needs 12 bounds of each kind");
        for (size_t j = 0; j < SIZE; ++j) {
            low_[j] = static_cast<float>(low[j]);
            high_[j] = static_cast<float>(high[j]);
        }
    }

    nb::object rows(nb::handle waiting, nb::handle budget, nb::handle rho, nb::handle spent, nb::handle last_spend,
                    nb::handle latency_ema, nb::handle ttft_ema, nb::handle alpha, int64_t round, double price,
                    double hit) {
        out_.resize(n_ * SIZE);
        try {
            fill(out_.data(), waiting, {budget, rho, spent, last_spend, latency_ema, ttft_ema, alpha}, round, price,
                 hit);
        } catch (const Unsupported &) {
            return nb::none();
        }
        return array_of(out_, shape_, float32_);
    }

private:
    struct Bidders {
        nb::handle budget, rho, spent, last_spend, latency_ema, ttft_ema, alpha;
    };

    void fill(float *out, nb::handle waiting, const Bidders &lists, int64_t round, double price, double hit) {
        if (!PyList_CheckExact(waiting.ptr())) throw Unsupported{};
        count_.assign(n_, 0);
        urgency_sum_.assign(n_, 0.0);
        Py_ssize_t queued = PyList_GET_SIZE(waiting.ptr());
        for (Py_ssize_t i = 0; i < queued; ++i) {
            PyObject *r = PyList_GET_ITEM(waiting.ptr(), i);
            PyObject *slots[2];
            bool in_place = waiting_slots_.read(r, slots) && slots[0] && slots[1];
            size_t b = index_of(in_place ? as_int(slots[0]) : bidder_.as_int_of(r), n_);
            count_[b] += 1;
            urgency_sum_[b] += in_place ? as_double(slots[1]) : urgency_.as_double_of(r);
        }
        const std::vector<double> &budget = numbers(lists.budget, 0), &rho = numbers(lists.rho, 1),
                                  &spent = numbers(lists.spent, 2), &last = numbers(lists.last_spend, 3),
                                  &latency = numbers(lists.latency_ema, 4), &ttft = numbers(lists.ttft_ema, 5),
                                  &alpha = numbers(lists.alpha, 6);
        if (T_ == 0) throw Unsupported{};
        double rounds = static_cast<double>(round > 1 ? round : 1);
        double time_left = static_cast<double>(T_ - round > 0 ? T_ - round : 0) / static_cast<double>(T_);
        double total_queue = log1p_checked(divide(static_cast<double>(queued), total_queue_scale_));
        for (size_t i = 0; i < n_; ++i) {
            double b = budget[i], p = rho[i], s = spent[i], c = static_cast<double>(count_[i]);
            double row[SIZE] = {
                divide(b - s, b),
                time_left,
                divide(divide(s, rounds), p),
                log1p_checked(divide(last[i], p)),
                log1p_checked(divide(c, queue_scale_)),
                divide(log1p_checked(urgency_sum_[i] / (count_[i] ? c : 1.0)), urgency_log_scale_),
                total_queue,
                divide(price, p),
                log1p_checked(divide(latency[i], latency_scale_)),
                log1p_checked(divide(ttft[i], ttft_scale_)),
                hit,
                divide(alpha[i], alpha_max_),
            };
            for (size_t j = 0; j < SIZE; ++j) out[i * SIZE + j] = clipped(static_cast<float>(row[j]), j);
        }
    }

    // The `n_` numbers of `values` into the `k`th of the per-bidder vectors, kept for their capacity.
    const std::vector<double> &numbers(nb::handle values, size_t k) {
        doubles(values, n_, per_bidder_[k]);
        return per_bidder_[k];
    }

    // numpy's minimum(maximum(v, low), high): NaN passes, and where v equals a bound the bound wins.
    float clipped(float v, size_t j) const {
        if (std::isnan(v)) return v;
        v = v > low_[j] ? v : low_[j];
        return v < high_[j] ? v : high_[j];
    }

    size_t n_;
    int64_t T_;
    double alpha_max_, queue_scale_, total_queue_scale_, urgency_log_scale_, latency_scale_, ttft_scale_;
    float low_[SIZE], high_[SIZE];
    nb::object shape_ = nb::make_tuple(n_, SIZE), float32_ = nb::module_::import_("numpy").attr("float32");
    Field bidder_{"bidder"}, urgency_{"urgency"};  // of the waiting requests
    market_fields::SlotGroup<2> waiting_slots_{{&bidder_, &urgency_}};
    // A call's scratch, kept for its capacity: the rows, each bidder's waiting requests and their
    // urgency, and the per-bidder numbers read.
    std::vector<float> out_;
    std::vector<int64_t> count_;
    std::vector<double> urgency_sum_;
    std::vector<double> per_bidder_[7];
};

}  // namespace

void bind_market_books(nb::module_ &m) {
    nb::class_<LatencyAccrual>(m, "LatencyAccrual",
                               "Market._accrued's state and loop, compiled: each bidder's latency cost in a step.")
        .def(nb::init<size_t, double>(), nb::arg("num_bidders"), nb::arg("episode_start"))
        .def("accrue", &LatencyAccrual::accrue, nb::arg("finished"), nb::arg("records"), nb::arg("held"),
             nb::arg("end"),
             "Each bidder's latency cost accrued up to `end` (a float64 array) over the requests finished and those "
             "`held` (the list `in_system` returns, or the compiled `Engine`, read in that order), or None, changing "
             "nothing, for input the Python code must handle.")
        .def("accrued_to", &LatencyAccrual::accrued_to, "{request id: time its accrual last stopped}.");
    nb::class_<ObservationRows>(m, "ObservationRows", "Market.observations' rows, compiled.")
        .def(nb::init<size_t, int64_t, double, double, double, double, double, double, std::vector<double>,
                      std::vector<double>>(),
             nb::arg("num_bidders"), nb::arg("pacing_rounds"), nb::arg("alpha_max"), nb::arg("queue_scale"),
             nb::arg("total_queue_scale"), nb::arg("urgency_log_scale"), nb::arg("latency_scale"),
             nb::arg("ttft_scale"), nb::arg("low"), nb::arg("high"))
        .def("__call__", &ObservationRows::rows, nb::arg("waiting"), nb::arg("budget"), nb::arg("rho"),
             nb::arg("spent"), nb::arg("last_spend"), nb::arg("latency_ema"), nb::arg("ttft_ema"), nb::arg("alpha"),
             nb::arg("round"), nb::arg("price"), nb::arg("hit"),
             "The rows, float32 (num_bidders, 12), or None for input the Python code must handle.");
}
