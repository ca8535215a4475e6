// The agentic workload's chunks (auction_gym/workload/agentic.py, `_Generator.chunk`) drawn in C++,
// draw for draw the Python generator's, on its numpy Generator (docs/design.md section 8).
//
// Built from a Python `_Generator` after its own draws (the bidders' prefixes and shape mixes), it
// draws every later chunk: the same numpy draws in the same order (numpy_draws.hpp) and the same
// drafts, down to their types and memory (a session's turns views of one read-only array, a
// fan-out's prompts rows of one matrix). What numpy computes with its own exp and cos, which may
// differ from libm's in the last bit, stays numpy's: the load curve is the same Python function
// called on the same array, the classes' draws (ClassLaws) call numpy's exp; the rest is sums,
// comparisons, fmod (exact) and integer arithmetic. `AgenticStream` is the stream over it
// (`agentic._stream`), the requests made in C++ as they are read.
#include "numpy_draws.hpp"

#include "../slot_fill.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include <nanobind/stl/string.h>

namespace workload {

namespace {

enum Shape { SESSION, FANOUT, ROLLOUT, URGENT };

// A drawn request not yet made: the fields of `_Generator.chunk`'s draft tuple (arrival, bidder,
// prompt, reply, kind, urgency, value, output_len, max_new_tokens), its numbers kept as numbers
// until a tuple or a Request is made of it. Its kind is one the chunks hold.
struct Draft {
    double arrival;
    int64_t bidder;
    nb::object prompt, reply;
    nb::handle kind;
    double urgency, value;
    int64_t output;
    nb::object cap;

    // The Python generator's draft tuple, one float its urgency (which a request's bid is too).
    nb::object tuple() const {
        return draft({py_float(arrival), py_int(bidder), prompt, reply, kind, py_float(urgency), py_float(value),
                      py_int(output), cap});
    }
};

Shape shape_of(const std::string &name) {
    if (name == "session") return SESSION;
    if (name == "fanout") return FANOUT;
    if (name == "rollout") return ROLLOUT;
    if (name == "urgent") return URGENT;
    throw nb::value_error("unknown episode shape");
}

class AgenticChunks {
public:
    AgenticChunks(nb::handle gen, nb::object wave, nb::dict class_laws, nb::handle session_laws)
        : draws_(gen.attr("rng")), wave_(std::move(wave)), urgent_laws_(class_laws[urgent_]),
          interactive_laws_(class_laws[interactive_]), background_laws_(class_laws[background_]),
          session_laws_(session_laws), bursts_(Bursts::of(gen)) {
        nb::object cfg = gen.attr("cfg");
        chunk_ = exact_int(gen.attr("CHUNK"));
        num_bidders_ = exact_int(cfg.attr("num_bidders"));
        vocab_ = exact_int(cfg.attr("vocab_size"));
        gap_scale_ = as_double(gen.attr("gap_scale"));
        peak_ = as_double(gen.attr("peak"));
        t_ = as_double(gen.attr("t"));
        horizon_ = as_double(gen.attr("horizon"));
        for (nb::handle name : gen.attr("shape_names")) shapes_.push_back(shape_of(nb::cast<std::string>(name)));
        nb::object cdf = as_array(gen.attr("bidder_cdf"), NPY_FLOAT64);
        bidder_cdf_.assign(data_of<double>(cdf), data_of<double>(cdf) + num_bidders_ * int64_t(shapes_.size()));
        for (nb::handle p : gen.attr("systems")) systems_.push_back(tokens_of(p));
        for (nb::handle p : gen.attr("with_tools")) with_tools_.push_back(tokens_of(p));
        caps_ = nb::borrow<nb::dict>(gen.attr("cap"));
        for (nb::handle name : gen.attr("session_classes").attr("names")) session_kinds_.push_back(nb::borrow(name));
        nb::object class_cdf = as_array(gen.attr("session_class_cdf"), NPY_FLOAT64);
        class_cdf_.assign(data_of<double>(class_cdf), data_of<double>(class_cdf) + session_kinds_.size());
        turn_p_ = 1.0 / as_double(cfg.attr("session_turns"));
        max_turns_ = exact_int(cfg.attr("max_session_turns"));
        think_time_ = as_double(cfg.attr("think_time"));
        turn_mean_ = poisson_mean(cfg.attr("user_turn_len"));
        query_mean_ = poisson_mean(cfg.attr("urgent_query_len"));
        nb::object width = cfg.attr("fanout_width");
        width_lo_ = exact_int(width[0]);
        width_hi_ = exact_int(width[1]);
        rollouts_ = exact_int(cfg.attr("rollouts"));
        context_ = exact_int(cfg.attr("context_len"));
        branch_ = exact_int(cfg.attr("branch_len"));
        // A chunk's fan-outs and rollouts sum their widths and tokens in int64 (`branches`, which
        // also draws widths below fanout_width's hi + 1): where a chunk's could overflow, the Python
        // generator draws, and raises numpy's error.
        int64_t row = 0, chunk_tokens = 0;
        if (width_hi_ == INT64_MAX || __builtin_mul_overflow(std::max(width_hi_, rollouts_), branch_, &row) ||
            __builtin_add_overflow(row, context_, &row) || __builtin_mul_overflow(row, chunk_, &chunk_tokens)) {
            throw nb::type_error("declined: a chunk's tokens past int64");
        }
        // `branches` draws a fan-out's or rollout's context into its first row (the configuration's
        // check asks for one): without one, the Python generator draws.
        if (width_lo_ < 1 || rollouts_ < 1) throw nb::type_error("declined: a fan-out or rollout without branches");
    }

    nb::object rng() const { return draws_.generator(); }
    double t() const { return t_; }
    double horizon() const { return horizon_; }

    // `_Generator.chunk`: the drafts of the next chunk's accepted episodes, in the order drawn.
    nb::list chunk() {
        std::vector<Draft> drafts;
        draw(drafts);
        nb::list out;
        for (const Draft &d : drafts) out.append(d.tuple());
        return out;
    }

    // `_Generator.chunk`'s drafts appended to `drafts`.
    void draw(std::vector<Draft> &drafts) {
        const int64_t n = chunk_;
        const std::vector<double> starts = starts_after(draws_, t_, n, gap_scale_);
        t_ = starts[n - 1];
        std::vector<double> accept(n), u(n);
        std::vector<int64_t> bidders(n);
        std::vector<double> rate = rates(starts);
        draws_.uniform(accept.data(), n);
        std::vector<char> accepted(n);
        for (int64_t i = 0; i < n; ++i) {
            accepted[i] = accept[i] * peak_ < (rate.empty() ? 1.0 : rate[i]);
            if (horizon_ < INFINITY) accepted[i] = accepted[i] && starts[i] < horizon_;
        }
        draws_.integers(bidders.data(), n, 0, num_bidders_);
        draws_.uniform(u.data(), n);
        const int64_t s = int64_t(shapes_.size());
        std::vector<int64_t> shape(n);
        for (int64_t i = 0; i < n; ++i) {
            const double *cdf = &bidder_cdf_[bidders[i] * s];
            int64_t past = 0;
            for (int64_t k = 0; k < s; ++k) past += u[i] >= cdf[k];
            shape[i] = std::min(past, s - 1);
        }
        for (int64_t k = 0; k < s; ++k) {
            std::vector<double> at;
            std::vector<int64_t> by;
            for (int64_t i = 0; i < n; ++i) {
                if (accepted[i] && shape[i] == k) {
                    at.push_back(starts[i]);
                    by.push_back(bidders[i]);
                }
            }
            if (at.empty()) continue;
            if (shapes_[k] == SESSION) sessions(drafts, at, by);
            else if (shapes_[k] == URGENT) urgent(drafts, at, by);
            else branches(drafts, at, by, shapes_[k]);
        }
    }

private:
    // Each candidate start's rate multiplier, or none where it is 1 throughout (`_Generator.chunk`).
    std::vector<double> rates(const std::vector<double> &starts) {
        std::vector<double> rate;
        if (bursts_.on) {
            for (double t : starts) rate.push_back(bursts_.rate(t));
        }
        if (wave_.is_none()) return rate;
        nb::object at = new_array(npy_intp(starts.size()), NPY_FLOAT64);
        std::copy(starts.begin(), starts.end(), data_of<double>(at));
        nb::object shaped = as_array(wave_(at), NPY_FLOAT64);
        const double *wave = data_of<double>(shaped);
        if (rate.empty()) return std::vector<double>(wave, wave + starts.size());
        for (size_t i = 0; i < rate.size(); ++i) rate[i] = rate[i] * wave[i];
        return rate;
    }

    // `_Generator.tokens(n)`, drawn into `out`. A chunk's shape draws its tokens in one call, which
    // gives the draws of consecutive calls (Draws::integers), so each prompt's tokens are drawn
    // straight into its array, in the order the one call draws them.
    void tokens(int64_t *out, int64_t n) { draws_.integers(out, n, 0, vocab_); }

    nb::object cap(nb::handle kind) { return caps_[kind]; }

    void urgent(std::vector<Draft> &drafts, const std::vector<double> &starts, const std::vector<int64_t> &bidders) {
        const int64_t n = int64_t(starts.size());
        nb::handle kind = urgent_;
        ClassDraws c = urgent_laws_.draw(draws_, n);
        std::vector<int64_t> ends(n);
        draws_.lengths(ends.data(), n, query_mean_);
        for (int64_t i = 1; i < n; ++i) ends[i] += ends[i - 1];
        nb::object limit = cap(kind);
        for (int64_t i = 0; i < n; ++i) {
            const Tokens &system = systems_[bidders[i]];
            nb::object prompt = after_prefix(draws_, system, ends[i] - (i ? ends[i - 1] : 0), vocab_);
            drafts.push_back({starts[i], bidders[i], std::move(prompt), nb::none(), kind, c.urgency[i], c.value[i],
                              c.output[i], limit});
        }
    }

    void sessions(std::vector<Draft> &drafts, const std::vector<double> &starts, const std::vector<int64_t> &bidders) {
        const int64_t n = int64_t(starts.size());
        std::vector<double> u(n);
        draws_.uniform(u.data(), n);
        std::vector<int64_t> turns(n);
        draws_.geometric(turns.data(), n, turn_p_);
        int64_t m = 0;
        nb::object which = new_array(npy_intp(n), NPY_INT64);
        int64_t *c = data_of<int64_t>(which);
        for (int64_t i = 0; i < n; ++i) {
            c[i] = class_of(class_cdf_, u[i]);
            turns[i] = std::min(turns[i], max_turns_);
            m += turns[i];
        }
        nb::object repeated = new_array(npy_intp(m), NPY_INT64);
        for (int64_t i = 0, j = 0; i < n; j += turns[i++]) std::fill_n(data_of<int64_t>(repeated) + j, turns[i], c[i]);
        ClassDraws d = session_laws_.draw(draws_, m, repeated);
        std::vector<double> gaps(m, 0.0);
        if (think_time_ > 0) draws_.exponential(gaps.data(), m, think_time_);
        std::vector<int64_t> drawn(m);  // tokens drawn up to each turn's end: its user message, then its reply
        draws_.lengths(drawn.data(), m, turn_mean_);
        for (int64_t j = 0; j < m; ++j) drawn[j] = (j ? drawn[j - 1] : 0) + drawn[j] + d.output[j];
        for (int64_t i = 0, first = 0, offset = 0; i < n; ++i) {
            const int64_t stop = first + turns[i];
            const Tokens &prefix = with_tools_[bidders[i]];
            nb::object session = after_prefix(draws_, prefix, drawn[stop - 1] - offset, vocab_);
            int64_t *s = data_of<int64_t>(session);
            nb::handle kind = session_kinds_[c[i]];
            nb::object limit = cap(kind);
            double t = starts[i];
            for (int64_t j = first; j < stop; ++j) {
                if (j > first) {  // turn k arrives an exponential think time after turn k-1 arrives
                    t += gaps[j];
                    if (t >= horizon_) break;
                }
                const int64_t o = d.output[j], end = prefix.size - offset + drawn[j];
                drafts.push_back({t, bidders[i], view(session, s, end - o), view(session, s + end - o, o), kind,
                                  d.urgency[j], d.value[j], o, limit});
            }
            first = stop;
            offset = drawn[stop - 1];
        }
    }

    void branches(std::vector<Draft> &drafts, const std::vector<double> &starts, const std::vector<int64_t> &bidders,
                  Shape shape) {
        const int64_t n = int64_t(starts.size());
        nb::handle kind = shape == FANOUT ? interactive_ : background_;
        std::vector<int64_t> widths(n, rollouts_);
        if (shape == FANOUT) draws_.integers(widths.data(), n, width_lo_, width_hi_ + 1);
        int64_t total = 0;
        for (int64_t w : widths) total += w;
        ClassDraws d = (shape == FANOUT ? interactive_laws_ : background_laws_).draw(draws_, total);
        nb::object limit = cap(kind);
        for (int64_t i = 0, first = 0; i < n; ++i) {
            // One row per branch: sys + tools, the shared context, then the branch's own suffix;
            // the context is drawn into the first row, then each branch's suffix into its row.
            const Tokens &prefix = with_tools_[bidders[i]];
            const int64_t row = prefix.size + context_ + branch_;
            npy_intp dims[2] = {npy_intp(widths[i]), npy_intp(row)};
            nb::object prompts = new_array(2, dims, NPY_INT64);
            int64_t *p = data_of<int64_t>(prompts);
            tokens(std::copy(prefix.data, prefix.data + prefix.size, p), context_ + branch_);
            for (int64_t j = 1; j < widths[i]; ++j) {
                tokens(std::copy(p, p + prefix.size + context_, p + j * row), branch_);
            }
            sealed(prompts);
            for (int64_t j = 0; j < widths[i]; ++j) {
                const int64_t k = first + j;
                drafts.push_back({starts[i], bidders[i], view(prompts, p + j * row, row), nb::none(), kind,
                                  d.urgency[k], d.value[k], d.output[k], limit});
            }
            first += widths[i];
        }
    }

    Draws draws_;
    // The kinds of the shapes that have one class, interned as the Python generator's literals are.
    nb::object urgent_ = interned("urgent"), interactive_ = interned("interactive"), background_ = interned("background");
    nb::object wave_;
    ClassLaws urgent_laws_, interactive_laws_, background_laws_, session_laws_;
    nb::dict caps_;
    int64_t chunk_, num_bidders_, vocab_;
    double gap_scale_, peak_, t_, horizon_;
    Bursts bursts_;
    std::vector<Shape> shapes_;
    std::vector<double> bidder_cdf_;
    std::vector<Tokens> systems_, with_tools_;
    std::vector<nb::object> session_kinds_;
    std::vector<double> class_cdf_;
    double turn_p_;
    int64_t max_turns_;
    double think_time_, turn_mean_, query_mean_;
    int64_t width_lo_, width_hi_, rollouts_, context_, branch_;
};

bool by_arrival(const Draft &a, const Draft &b) { return a.arrival < b.arrival; }
bool arrives_before(const Draft &a, double t) { return a.arrival < t; }

// A plain Request of a draft's fields, its id `id`, made slot by slot (slot_fill.hpp) as
// `request.unchecked_many` makes it on the compiled core: its bid and urgency one float. Where
// the class no longer takes that (a field made a property since), `Request._unchecked_many` makes
// it, as the Python stream's fallback does.
nb::object request_of(const Draft &d, int64_t id) {
    static constexpr std::array<const char *, 11> fields = {
        "id", "bidder", "tokens", "bid", "output_len", "arrival", "value", "urgency", "output_tokens", "kind",
        "max_new_tokens"};
    static auto *maker = new pyslots::SlotMaker<11>(  // never freed: the class may outlive the module's teardown
        nb::module_::import_("auction_gym.request").attr("Request"), fields);
    nb::object urgency = py_float(d.urgency);
    const std::array<nb::object, 11> values = {py_int(id), py_int(d.bidder), d.prompt, urgency, py_int(d.output),
                                               py_float(d.arrival), py_float(d.value), urgency, d.reply,
                                               nb::borrow(d.kind), d.cap};
    std::array<nb::handle, 11> slots;
    std::copy(values.begin(), values.end(), slots.begin());
    nb::object made = maker->make(slots);
    if (made.is_valid()) return made;
    nb::dict columns;
    for (size_t i = 1; i < fields.size(); ++i) columns[fields[i]] = nb::make_tuple(values[i]);
    return maker->cls().attr("_unchecked_many")(nb::arg("first_id") = values[0], **columns)[0];
}

// `agentic._stream` on the compiled chunks (docs/engine.md section 8): the drafts not yet read
// kept in C++, each chunk merged in by arrival as the Python stream's stable sort orders them
// (equal arrivals in the order drawn), each request made as it is read, so reading one runs no
// Python code. As lazy as the Python generator: its first read calls `start`, which makes the
// generator and returns its compiled chunks and the request limit (None: none), or the Python
// stream, which it then reads, where the Python generator draws.
class AgenticStream {
public:
    explicit AgenticStream(nb::object start) : start_(std::move(start)) {}

    // The next request, or a null object at the stream's end (with the exception raised, if one was).
    nb::object next() {
        if (start_.is_valid()) begin();
        if (python_.is_valid()) return nb::steal(PyIter_Next(python_.ptr()));
        if (head_ == due_ && !draw()) return nb::object();
        nb::object made = request_of(ready_[head_++], emitted_++);
        if (head_ == due_) ready_.erase(ready_.begin(), ready_.begin() + int64_t(due_));
        return made;
    }

    // After an exception, as a Python generator that raised: nothing more.
    void end() {
        ended_ = true;
        head_ = due_ = 0;
        ready_.clear();
        python_ = nb::object();
    }

private:
    void begin() {
        ended_ = true;  // where `start` raises
        const nb::object start = std::move(start_), started = start();
        if (!nb::isinstance<nb::tuple>(started)) {
            python_ = nb::iter(started);
            return;
        }
        chunks_object_ = started[0];
        chunks_ = nb::cast<AgenticChunks *>(chunks_object_);
        int overflow = 0;  // a limit past int64 is never reached
        limit_ = started[1].is_none() ? INT64_MAX : PyLong_AsLongLongAndOverflow(started[1].ptr(), &overflow);
        if (overflow > 0) limit_ = INT64_MAX;
        if (limit_ == -1 && PyErr_Occurred()) throw nb::python_error();
        ended_ = false;
    }

    // `_requests`' loop: chunks drawn until some drafts are due (no later chunk has a request before
    // the last candidate start) or the limit or horizon is reached; false where none is due.
    bool draw() {
        head_ = due_ = 0;
        while (!ended_ && emitted_ < limit_) {
            const auto drawn = int64_t(ready_.size());
            chunks_->draw(ready_);
            std::stable_sort(ready_.begin() + drawn, ready_.end(), by_arrival);
            std::inplace_merge(ready_.begin(), ready_.begin() + drawn, ready_.end(), by_arrival);
            const double bound = std::min(chunks_->t(), chunks_->horizon());
            const auto due = std::lower_bound(ready_.begin(), ready_.end(), bound, arrives_before) - ready_.begin();
            due_ = size_t(std::min(int64_t(due), limit_ - emitted_));
            ended_ = chunks_->t() >= chunks_->horizon();
            if (due_) return true;
        }
        return false;
    }

    nb::object start_, python_, chunks_object_;
    AgenticChunks *chunks_ = nullptr;
    std::vector<Draft> ready_;  // drafts drawn and not read, by arrival; [head_, due_) due
    size_t head_ = 0, due_ = 0;
    int64_t emitted_ = 0, limit_ = 0;
    bool ended_ = false;
};

PyObject *stream_next(PyObject *self) {
    if (!nb::inst_ready(self)) {
        PyErr_SetString(PyExc_TypeError, "AgenticStream is not initialized");
        return nullptr;
    }
    AgenticStream *stream = nb::inst_ptr<AgenticStream>(self);
    try {
        return stream->next().release().ptr();
    } catch (nb::python_error &e) {
        stream->end();
        e.restore();
    } catch (const std::exception &e) {
        stream->end();
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

PyObject *stream_iter(PyObject *self) { return Py_NewRef(self); }

// The stream is its own iterator, read through the type's slots without a Python call.
PyType_Slot stream_slots[] = {{Py_tp_iter, reinterpret_cast<void *>(stream_iter)},
                              {Py_tp_iternext, reinterpret_cast<void *>(stream_next)},
                              {0, nullptr}};

}  // namespace

void bind_agentic(nb::module_ &m) {
    nb::class_<AgenticChunks>(m, "AgenticChunks")
        .def(nb::init<nb::handle, nb::object, nb::dict, nb::handle>(), nb::arg("generator"), nb::arg("wave").none(),
             nb::arg("class_laws"), nb::arg("session_laws"))
        .def("chunk", &AgenticChunks::chunk)
        .def_prop_ro("rng", &AgenticChunks::rng)
        .def_prop_ro("t", &AgenticChunks::t)
        .def_prop_ro("horizon", &AgenticChunks::horizon);
    nb::class_<AgenticStream>(m, "AgenticStream", nb::type_slots(stream_slots))
        .def(nb::init<nb::object>(), nb::arg("start"));
}

}  // namespace workload
