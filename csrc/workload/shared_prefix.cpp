// The shared-prefix workload's chunks (auction_gym/workload/shared_prefix.py, `_Chunks.chunk`)
// drawn in C++, draw for draw the Python's, on its numpy Generator (docs/design.md section 8).
//
// Built from a Python `_Chunks` after its own draws (the groups' system prompts and order), it draws
// every chunk: the same numpy draws in the same order (numpy_draws.hpp) and the same fields, the
// classes' urgencies and values drawn as the Python `from_normals` draws them (ClassLaws: numpy's own exp).
#include "numpy_draws.hpp"

#include <algorithm>
#include <cmath>

namespace workload {

namespace {

class SharedPrefixChunks {
public:
    SharedPrefixChunks(nb::handle gen, nb::handle class_laws)
        : draws_(gen.attr("rng")), bursts_(Bursts::of(gen)), laws_(class_laws) {
        nb::object cfg = gen.attr("cfg");
        chunk_ = exact_int(nb::module_::import_("auction_gym.workload.shared_prefix").attr("CHUNK"));
        num_requests_ = exact_int(cfg.attr("num_requests"));
        num_bidders_ = exact_int(cfg.attr("num_bidders"));
        vocab_ = exact_int(cfg.attr("vocab_size"));
        ratio_ = as_double(cfg.attr("range_ratio"));
        question_ = exact_int(cfg.attr("question_len"));
        output_ = exact_int(cfg.attr("output_len"));
        gap_scale_ = as_double(gen.attr("gap_scale"));
        peak_ = as_double(gen.attr("peak"));
        t_ = as_double(gen.attr("t"));
        for (nb::handle p : gen.attr("systems")) systems_.push_back(tokens_of(p));
        for (nb::handle g : gen.attr("group_of")) group_of_.push_back(exact_int(g));
        for (nb::handle name : gen.attr("names")) names_.push_back(nb::borrow(name));
        nb::object cdf = as_array(gen.attr("cdf"), NPY_FLOAT64);
        cdf_.assign(data_of<double>(cdf), data_of<double>(cdf) + names_.size());
    }

    nb::object rng() const { return draws_.generator(); }
    double t() const { return t_; }

    // `_Chunks.chunk`: arrivals, bidders, prompts, output lengths, urgencies, values, kinds.
    nb::tuple chunk(int64_t emitted) {
        const std::vector<double> starts = starts_after(draws_, t_, chunk_, gap_scale_);
        t_ = starts[chunk_ - 1];
        std::vector<double> u(chunk_), arrivals;
        draws_.uniform(u.data(), chunk_);
        for (int64_t i = 0; i < chunk_; ++i) {
            if (u[i] * peak_ < bursts_.rate(starts[i])) arrivals.push_back(starts[i]);
        }
        arrivals.resize(std::min(int64_t(arrivals.size()), num_requests_ - emitted));
        const int64_t m = int64_t(arrivals.size());
        nb::list at, bidders, prompts, outs, w, v, kinds;
        if (m == 0) return nb::make_tuple(at, bidders, prompts, outs, w, v, kinds);
        std::vector<int64_t> ends = lengths(question_, m), out = lengths(output_, m);
        for (int64_t i = 1; i < m; ++i) ends[i] += ends[i - 1];
        // The questions are one integers() draw, which gives the draws of consecutive calls
        // (Draws::integers): each is drawn straight into its prompt, after its group's system prompt.
        for (int64_t i = 0; i < m; ++i) {
            prompts.append(
                after_prefix(draws_, systems_[group_of_[emitted + i]], ends[i] - (i ? ends[i - 1] : 0), vocab_));
        }
        std::vector<double> r(m);
        draws_.uniform(r.data(), m);
        nb::object which = new_array(npy_intp(m), NPY_INT64);
        int64_t *c = data_of<int64_t>(which);
        for (int64_t i = 0; i < m; ++i) c[i] = class_of(cdf_, r[i]);
        ClassDraws d = laws_.draw(draws_, m, which);
        for (int64_t i = 0; i < m; ++i) {
            at.append(py_float(arrivals[i]));
            bidders.append(py_int(group_of_[emitted + i] % num_bidders_));
            outs.append(py_int(out[i]));
            w.append(py_float(d.urgency[i]));
            v.append(py_float(d.value[i]));
            kinds.append(names_[c[i]]);
        }
        return nb::make_tuple(at, bidders, prompts, outs, w, v, kinds);
    }

private:
    // `_lengths`: n lengths uniform in [max(int(full x ratio), 1), full], or `full` without a range.
    std::vector<int64_t> lengths(int64_t full, int64_t n) {
        std::vector<int64_t> out(n, full);
        if (ratio_ < 1) draws_.integers(out.data(), n, std::max(int64_t(double(full) * ratio_), int64_t(1)), full + 1);
        return out;
    }

    Draws draws_;
    int64_t chunk_, num_requests_, num_bidders_, vocab_, question_, output_;
    Bursts bursts_;
    double ratio_;
    double gap_scale_, peak_, t_;
    std::vector<Tokens> systems_;
    std::vector<int64_t> group_of_;
    std::vector<nb::object> names_;
    std::vector<double> cdf_;
    ClassLaws laws_;
};

}  // namespace

void bind_shared_prefix(nb::module_ &m) {
    nb::class_<SharedPrefixChunks>(m, "SharedPrefixChunks")
        .def(nb::init<nb::handle, nb::handle>(), nb::arg("generator"), nb::arg("class_laws"))
        .def("chunk", &SharedPrefixChunks::chunk, nb::arg("emitted"))
        .def_prop_ro("rng", &SharedPrefixChunks::rng)
        .def_prop_ro("t", &SharedPrefixChunks::t);
}

}  // namespace workload
