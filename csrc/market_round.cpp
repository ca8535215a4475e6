// A market round's bids and settlement (auction_gym/market/market.py, `Market._bids` and
// `Market._settle`; docs/design.md section 8): each bidder's multiplier and budget left for the
// engine's round, then the welfare, utilities and latencies of the requests finished in the round
// (`Market._account_finished`), the hit rate and the charges capped by the budgets left
// (`Market._charge`), the moving averages they update, and the round's arrays, in one call.
//
// Bit-identical to the Python: the same double operations in the same order, `sum()` added as the
// interpreter adds (`PySum`). The round's charges are asked of its decision through Python
// (`Decision.charges`), as the Python asks them. An input the Python treats its own way (a record
// that is not a `RequestRecord`, a field not an exact float or int, a bidder out of range, a prompt
// of no tokens, charges that are not a dict of ints to floats, a decision whose `charges` raises)
// makes it answer None without changing anything, and the market runs the Python code instead.
#include <nanobind/nanobind.h>

#include <cmath>
#include <vector>

#include "bindings.hpp"
#include "market_fields.hpp"
#include "py_sum.hpp"

namespace nb = nanobind;

namespace {

using market_fields::array_of;
using market_fields::as_float;
using market_fields::as_int;
using market_fields::doubles;
using market_fields::Field;
using market_fields::index_of;
using auction_core::PySum;
using market_fields::Unsupported;

// What `Market._settle` computes of a round; `charged` whether any payment is not 0. The
// vectors are the ledger's, kept for their capacity from round to round.
struct Settlement {
    std::vector<double> utility, payments, latency_ema, ttft_ema;
    double welfare = 0.0, mean_latency = NAN, mean_ttft = NAN, hit_rate = NAN, hit_ema = 0.0, price_ema = 0.0;
    std::vector<int64_t> capped;
    bool charged = false;

    void start(double hit_average, double price_average) {
        welfare = 0.0, mean_latency = mean_ttft = hit_rate = NAN;
        hit_ema = hit_average, price_ema = price_average;
        capped.clear();
        charged = false;
    }
};

class RoundLedger {
public:
    RoundLedger(size_t n, double ema_weight, nb::handle record_type)
        : n_(n), weight_(ema_weight), record_type_(nb::borrow(record_type)) {}

    nb::object settle(nb::handle finished, nb::handle admitted, nb::handle decision, nb::handle records,
                      nb::handle budget, nb::handle spent, nb::handle latency_ema, nb::handle ttft_ema,
                      double hit_ema, double price_ema, double seconds_per_unit) {
        Settlement &s = settlement_;
        s.start(hit_ema, price_ema);
        try {
            if (!PyList_CheckExact(finished.ptr()) || !PyList_CheckExact(admitted.ptr()) ||
                !PyDict_CheckExact(records.ptr()) || !PyList_CheckExact(latency_ema.ptr()) ||
                !PyList_CheckExact(ttft_ema.ptr()))
                throw Unsupported{};
            doubles(spent, n_, spent_);
            doubles(latency_ema, n_, s.latency_ema);
            doubles(ttft_ema, n_, s.ttft_ema);
            account_finished(s, finished, records);
            s.payments.assign(n_, 0.0);
            if (PyList_GET_SIZE(admitted.ptr()) > 0) {
                doubles(budget, n_, budget_);
                charge(s, admitted, decision, records, seconds_per_unit);
            }
        } catch (const Unsupported &) {
            return nb::none();
        }
        store(latency_ema, s.latency_ema);
        store(ttft_ema, s.ttft_ema);
        return result();
    }

    // `Market._bids`: (the multipliers as an array, the round's multipliers, budgets left), or None
    // where Python raises or reads the multipliers its own way (anything but a list of floats or a
    // 1-d float64 array, whose items `tolist` makes floats of the same values).
    nb::object bids(nb::handle multipliers, nb::handle spent, nb::handle budget) {
        std::vector<double> &alpha = alpha_, &s = spent_, &b = budget_;
        const bool listed = PyList_CheckExact(multipliers.ptr());
        try {
            for (Py_ssize_t i = 0; listed && i < PyList_GET_SIZE(multipliers.ptr()); ++i)
                if (!PyFloat_CheckExact(PyList_GET_ITEM(multipliers.ptr(), i))) throw Unsupported{};
            doubles(multipliers, n_, alpha);
            doubles(spent, n_, s);
            doubles(budget, n_, b);
        } catch (const Unsupported &) {
            return nb::none();
        }
        nb::list alpha_now = nb::steal<nb::list>(PyList_New(static_cast<Py_ssize_t>(n_)));
        nb::list remaining = nb::steal<nb::list>(PyList_New(static_cast<Py_ssize_t>(n_)));
        for (size_t i = 0; i < n_; ++i) {
            if (!(0.0 <= alpha[i] && alpha[i] < INFINITY)) return nb::none();  // NaN fails too
            bool left = s[i] < b[i];
            PyObject *a = !left ? Py_NewRef(zero_.ptr())
                          : listed ? Py_NewRef(PyList_GET_ITEM(multipliers.ptr(), static_cast<Py_ssize_t>(i)))
                                   : PyFloat_FromDouble(alpha[i]);  // the same floats the Python lists hold
            if (!a) throw nb::python_error();
            PyList_SET_ITEM(alpha_now.ptr(), static_cast<Py_ssize_t>(i), a);
            PyObject *r = PyFloat_FromDouble(left ? b[i] - s[i] : 0.0);
            if (!r) throw nb::python_error();
            PyList_SET_ITEM(remaining.ptr(), static_cast<Py_ssize_t>(i), r);
        }
        return nb::make_tuple(array_of(alpha), alpha_now, remaining);
    }

private:
    double ema(double old, double now) const { return old + weight_ * (now - old); }

    PyObject *record(nb::handle records, PyObject *rid) const {
        PyObject *rec = PyDict_GetItemWithError(records.ptr(), rid);  // borrowed
        if (!rec) {
            PyErr_Clear();
            throw Unsupported{};
        }
        // Its `latency` and `ttft` are RequestRecord's properties, which a subclass may redefine.
        if (Py_TYPE(rec) != reinterpret_cast<PyTypeObject *>(record_type_.ptr())) throw Unsupported{};
        return rec;
    }

    // `Market._account_finished`: welfare, utilities and the latency averages.
    void account_finished(Settlement &s, nb::handle finished, nb::handle records) {
        s.utility.assign(n_, 0.0);
        Py_ssize_t k = PyList_GET_SIZE(finished.ptr());
        if (k == 0) return;
        std::vector<double> &lat = latency_sum_, &ttft = ttft_sum_;
        std::vector<int64_t> &count = count_;
        lat.assign(n_, 0.0);
        ttft.assign(n_, 0.0);
        count.assign(n_, 0);
        for (Py_ssize_t j = 0; j < k; ++j) {
            PyObject *rec = record(records, PyList_GET_ITEM(finished.ptr(), j));
            size_t b = index_of(bidder_.as_int_of(rec), n_);
            double arrival = arrival_.as_float_of(rec);
            double latency = finish_.as_float_of(rec) - arrival;
            double u = value_.as_float_of(rec) - urgency_.as_float_of(rec) * latency;
            s.utility[b] += u;
            s.welfare += u;
            lat[b] += latency;
            ttft[b] += first_token_.as_float_of(rec) - arrival;
            count[b] += 1;
        }
        PySum lat_sum, ttft_sum;
        for (size_t i = 0; i < n_; ++i) lat_sum.add(lat[i]);
        for (size_t i = 0; i < n_; ++i) ttft_sum.add(ttft[i]);
        s.mean_latency = lat_sum.value() / static_cast<double>(k);
        s.mean_ttft = ttft_sum.value() / static_cast<double>(k);
        for (size_t i = 0; i < n_; ++i) {
            if (!count[i]) continue;
            s.latency_ema[i] = ema(s.latency_ema[i], lat[i] / static_cast<double>(count[i]));
            s.ttft_ema[i] = ema(s.ttft_ema[i], ttft[i] / static_cast<double>(count[i]));
        }
    }

    // `Market._charge`: the hit rate, the decision's charges capped by the budgets left, the price.
    void charge(Settlement &s, nb::handle admitted, nb::handle decision, nb::handle records, double seconds_per_unit) {
        constexpr int64_t exact = int64_t{1} << 53;  // Python divides the exact ints
        Py_ssize_t k = PyList_GET_SIZE(admitted.ptr());
        std::vector<int64_t> &per_bidder = count_;
        per_bidder.assign(n_, 0);
        int64_t cached = 0, prompt = 0;
        for (Py_ssize_t j = 0; j < k; ++j) {
            PyObject *rec = record(records, PyList_GET_ITEM(admitted.ptr(), j));
            per_bidder[index_of(bidder_.as_int_of(rec), n_)] += 1;
            int64_t c = cached_.as_int_of(rec), p = prompt_.as_int_of(rec);
            if (c < 0 || p < 0 || c >= exact || p >= exact) throw Unsupported{};
            cached += c;
            prompt += p;
            if (cached >= exact || prompt >= exact) throw Unsupported{};
        }
        if (prompt == 0) throw Unsupported{};  // ZeroDivisionError in Python
        s.hit_rate = static_cast<double>(cached) / static_cast<double>(prompt);
        s.hit_ema = ema(s.hit_ema, s.hit_rate);
        if (!decision.is_none()) apply_charges(s, charges_of(decision, admitted, per_bidder, seconds_per_unit));
        PySum total;
        for (double p : s.payments) total.add(p);
        s.price_ema = ema(s.price_ema, total.value() / static_cast<double>(k));
    }

    nb::object charges_of(nb::handle decision, nb::handle admitted, const std::vector<int64_t> &per_bidder,
                          double seconds_per_unit) const {
        nb::list counts;
        for (int64_t c : per_bidder) counts.append(nb::int_(c));
        PyObject *due = PyObject_CallMethodObjArgs(decision.ptr(), charges_name_.ptr(), admitted.ptr(), counts.ptr(),
                                                   nb::float_(seconds_per_unit).ptr(), nullptr);
        if (!due) {  // Market keeps the error (`_AskedOnce`), which its Python settlement raises
            if (!PyErr_ExceptionMatches(PyExc_Exception)) throw nb::python_error();
            PyErr_Clear();
            throw Unsupported{};
        }
        nb::object out = nb::steal(due);
        if (!PyDict_CheckExact(due)) throw Unsupported{};
        return out;
    }

    void apply_charges(Settlement &s, nb::handle charges) const {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(charges.ptr(), &pos, &key, &value)) {
            size_t i = index_of(as_int(key), n_);
            double due = as_float(value);
            double left = budget_[i] - spent_[i];
            left = 0.0 > left ? 0.0 : left;  // Python's max(x, 0.0)
            if (due > left) {
                s.capped.push_back(static_cast<int64_t>(i));
                due = left;
            }
            s.payments[i] = due;
        }
        for (double p : s.payments) s.charged = s.charged || p != 0.0;  // Python's any(): NaN counts
    }

    static void store(nb::handle list, const std::vector<double> &values) {
        for (size_t i = 0; i < values.size(); ++i) {
            PyObject *old = PyList_GET_ITEM(list.ptr(), i);
            if (PyFloat_CheckExact(old) && PyFloat_AS_DOUBLE(old) == values[i] &&
                std::signbit(PyFloat_AS_DOUBLE(old)) == std::signbit(values[i]))
                continue;  // unchanged: the object stays
            PyObject *value = PyFloat_FromDouble(values[i]);
            if (!value || PyList_SetItem(list.ptr(), static_cast<Py_ssize_t>(i), value) != 0) throw nb::python_error();
        }
    }

    // (utility, payments, spent after the round or None when nothing was charged, welfare,
    // mean latency, mean ttft, hit rate, capped, hit average, price average).
    nb::object result() {
        const Settlement &s = settlement_;
        nb::object spent_after = nb::none();
        if (s.charged) {  // numpy's u - p and spent + p, element by element
            utility_.resize(n_);
            for (size_t i = 0; i < n_; ++i) {
                utility_[i] = s.utility[i] - s.payments[i];
                spent_[i] = spent_[i] + s.payments[i];
            }
            spent_after = array_of(spent_);
        }
        nb::tuple capped = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(s.capped.size())));
        if (!capped.is_valid()) throw nb::python_error();
        for (size_t i = 0; i < s.capped.size(); ++i)
            PyTuple_SET_ITEM(capped.ptr(), static_cast<Py_ssize_t>(i), nb::int_(s.capped[i]).release().ptr());
        return nb::make_tuple(array_of(s.charged ? utility_ : s.utility), array_of(s.payments), spent_after,
                              s.welfare, s.mean_latency, s.mean_ttft, s.hit_rate, capped, s.hit_ema, s.price_ema);
    }

    size_t n_;
    double weight_;
    nb::object record_type_;
    nb::object charges_name_ = nb::steal(PyUnicode_InternFromString("charges"));
    nb::object zero_ = nb::float_(0.0);
    Field bidder_{"bidder"}, arrival_{"arrival"}, finish_{"finish"}, first_token_{"first_token"}, value_{"value"},
        urgency_{"urgency"}, cached_{"cached_tokens"}, prompt_{"prompt_len"};  // of the records
    // A call's numbers, kept for their capacity: the round's settlement, each bidder's spend before
    // it (after it, once charged) and budget, the multipliers read, the sums over the finished
    // requests and the counts of finished or admitted requests, and the utility less the payments.
    Settlement settlement_;
    std::vector<double> spent_, budget_, alpha_, latency_sum_, ttft_sum_, utility_;
    std::vector<int64_t> count_;
};

}  // namespace

void bind_market_round(nb::module_ &m) {
    nb::class_<RoundLedger>(m, "RoundLedger", "Market._settle compiled: a round's welfare, charges and averages.")
        .def(nb::init<size_t, double, nb::handle>(), nb::arg("num_bidders"), nb::arg("ema_weight"),
             nb::arg("record_type"))
        .def("settle", &RoundLedger::settle, nb::arg("finished"), nb::arg("admitted"), nb::arg("decision").none(),
             nb::arg("records"), nb::arg("budget"), nb::arg("spent"), nb::arg("latency_ema"), nb::arg("ttft_ema"),
             nb::arg("hit_ema"), nb::arg("price_ema"), nb::arg("seconds_per_unit"),
             "(utility, payments, spent after or None, welfare, mean latency, mean ttft, hit rate, capped, hit "
             "average, price average), the latency and ttft averages' lists updated; or None, changing nothing, "
             "for input the Python code must handle.")
        .def("bids", &RoundLedger::bids, nb::arg("multipliers"), nb::arg("spent"), nb::arg("budget"),
             "(the multipliers as an array, the round's multipliers and budgets left, 0 for a bidder out of budget), "
             "or None for input the Python code must handle (it raises on a multiplier not finite and >= 0).");
}
