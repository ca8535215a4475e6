// What engine/records.summarize reads of the engine's records, in one pass (docs/design.md
// section 8): the finished requests' times to first token and latencies (as arrays), the counts
// and the token sums, and the finished requests' span, with Python's operations in its order.
// Records of exactly the given class (whose properties a subclass may redefine) with plain fields
// (floats where the class has floats, ints within what a double holds exactly) are read; any other
// list answers None, and the Python code reads it.
#include <nanobind/nanobind.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bindings.hpp"
#include "market_fields.hpp"

namespace nb = nanobind;

namespace {

using market_fields::Field;
using market_fields::Unsupported;

// 2^53: an int sum up to it converts to a double exactly, so Python's int / int and int / float
// are the doubles' division.
constexpr int64_t EXACT = int64_t(1) << 53;

int64_t add(int64_t total, int64_t x) {
    if (x < 0 || x > EXACT || total + x > EXACT) throw Unsupported{};
    return total + x;
}

struct Columns {
    std::vector<double> ttft, latency;
    int64_t rejected = 0, retractions = 0, prompt = 0, cached = 0, output = 0;
    double last_finish = NAN, first_arrival = NAN;
};

class RecordColumns {
public:
    // `summarize`'s columns of `records` (a list): (finished, rejected, retractions, ttft, latency,
    // prompt, cached, output, span), ttft and latency numpy arrays; span None without a finished one.
    nb::object read(nb::handle records, nb::handle record_type) {
        if (!PyList_CheckExact(records.ptr())) return nb::none();
        Columns c;
        try {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records.ptr()); ++i)
                add_record(c, PyList_GET_ITEM(records.ptr(), i), record_type.ptr());
        } catch (const Unsupported &) {
            return nb::none();
        }
        const size_t done = c.latency.size();
        nb::object span = done ? nb::object(nb::float_(c.last_finish - c.first_arrival)) : nb::none();
        return nb::make_tuple(done, c.rejected, c.retractions, market_fields::array_of(c.ttft),
                              market_fields::array_of(c.latency), c.prompt, c.cached, c.output, span);
    }

private:
    void add_record(Columns &c, PyObject *rec, PyObject *record_type) {
        if (Py_TYPE(rec) != reinterpret_cast<PyTypeObject *>(record_type)) throw Unsupported{};
        c.rejected += !rejected_.is_none_of(rec);
        c.retractions = add(c.retractions, retractions_.as_int_of(rec));
        const double finish = finish_.as_float_of(rec);
        if (std::isnan(finish)) return;
        const double arrival = arrival_.as_float_of(rec);
        c.ttft.push_back(first_token_.as_float_of(rec) - arrival);
        c.latency.push_back(finish - arrival);
        c.prompt = add(c.prompt, prompt_len_.as_int_of(rec));
        c.cached = add(c.cached, cached_.as_int_of(rec));
        c.output = add(c.output, output_len_.as_int_of(rec));
        // max() and min() as Python's keep their first item unless a later one compares past it
        if (c.latency.size() == 1 || finish > c.last_finish) c.last_finish = finish;
        if (c.latency.size() == 1 || arrival < c.first_arrival) c.first_arrival = arrival;
    }

    Field finish_{"finish"}, arrival_{"arrival"}, first_token_{"first_token"}, prompt_len_{"prompt_len"},
        cached_{"cached_tokens"}, output_len_{"output_len"}, retractions_{"retractions"}, rejected_{"rejected"};
};

}  // namespace

void bind_records_summary(nb::module_ &m) {
    nb::class_<RecordColumns>(m, "RecordColumns")
        .def(nb::init<>())
        .def("read", &RecordColumns::read, nb::arg("records"), nb::arg("record_type"),
             "summarize's columns of the records, or None for records it does not read as they are.");
}
