// The compiled engine's iteration, its arrivals and its admission with the prefill that follows:
// serving_engine.ServingEngine's steps 1 and 2 (decode and retirement: engine_decode.cpp), each
// method following the Python one of the same name.
#include <nanobind/stl/string.h>
#include <nanobind/stl/shared_ptr.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "engine.hpp"
#include "slot_fill.hpp"

namespace engine {

void HeadSet::clear(std::size_t waiting) {
    ++check;
    if (seen.size() > 4096 + 8 * waiting) {
        bytes_of.clear();
        numbers.clear();
        seen.clear();
        ++epoch;
    }
}

uint64_t HeadSet::number(std::string_view bytes) {
    auto found = numbers.find(bytes);
    if (found != numbers.end()) return found->second;
    const uint64_t n = seen.size();
    seen.push_back(0);
    numbers.emplace(bytes_of.emplace_back(bytes), n);
    return n;
}

bool HeadSet::insert(uint64_t head) {
    if (seen[head] == check) return true;
    seen[head] = check;
    return false;
}

Engine::Engine(nb::handle scheduler_, nb::handle config_, nb::handle cache_, nb::handle prefixes_, nb::dict records)
    : config(config_), scheduler(nb::borrow(scheduler_)), config_object(nb::borrow(config_)),
      cache_object(nb::borrow(cache_)), prefixes_object(nb::borrow(prefixes_)),
      cache(radix::compiled_cache(cache_, "the compiled engine")), prefixes(nb::cast<radix::WaitingPrefixes *>(prefixes_)),
      arrivals(std::move(records)), future(config) {}

nb::object Engine::step(nb::handle multipliers, nb::handle remaining) {
    Step s = iterate(multipliers, remaining);
    if (s.kind == Kind::none) return nb::none();
    const Python &py = python();
    nb::handle kind = s.kind == Kind::prefill ? py.names.prefill : s.kind == Kind::decode ? py.names.decode
                                                                                           : py.names.idle;
    return py.iteration(kind, s.start, s.end, s.queue_len, list_of(s.admitted), list_of(s.finished),
                        list_of(s.rejected), s.done, list_of(s.resumed), list_of(s.retracted), 0, s.decision,
                        nb::list());
}

Step Engine::iterate(nb::handle multipliers, nb::handle remaining) {
    Step s;
    s.rejected = let_in_arrivals();
    s.start = now;
    s.queue_len = int64_t(nb::len(queue.requests));
    if (s.queue_len || chunked) {
        std::vector<Admission> batch;
        nb::object decision = schedule_prefill(batch, multipliers, remaining);
        if (!batch.empty()) {
            run_prefill(batch, s.admitted, s.resumed);
            s.finished = retire(pop_finished());
            s.kind = Kind::prefill;
            s.end = now;
            s.decision = decision;
            return s;
        }
    }
    if (!running.empty()) {
        s.retracted = make_room();
        s.done = decode(!s.retracted.empty(), s.finished);
        s.kind = Kind::decode;
        s.end = now;
        return s;
    }
    if (!config.oracle) future.ratio = future.init;  // SGLang resets the ratio when it idles
    double next = arrivals.next_time();
    if (std::isinf(next)) {
        if (!s.rejected.empty()) s.kind = Kind::idle;
        s.end = s.start;
        return s;
    }
    now = std::max(now, next);
    s.kind = Kind::idle;
    s.end = now;
    return s;
}

Ids Engine::let_in_arrivals() {
    Ids rejected;
    std::vector<ReqPtr> arrived = arrivals.due(now);
    const auto too_long = [this](const ReqPtr &r) { return r->output_len > config.output_room(r->prompt_len); };
    for (const ReqPtr &r : arrived) {
        if (too_long(r)) {
            const Names &name = python().names;
            record(*r).attr(name.rejected) =
                config_object.attr("rejection")(r->prompt_len, r->obj.attr(name.output_len));
            rejected.push_back(r->id);
        }
    }
    arrived.erase(std::remove_if(arrived.begin(), arrived.end(), too_long), arrived.end());  // the rest let in
    if (!arrived.empty()) {
        std::vector<int64_t> needs;
        needs.reserve(arrived.size());
        for (const ReqPtr &r : arrived) needs.push_back(smallest_need(*r, 0, cap(*r)));
        queue.arrive(arrived, needs);
    }
    return rejected;
}

// Admission (step 2).

double Engine::room() { return rules_room(free_and_evictable() - promised, steps); }

void Engine::make_free(int64_t tokens) {
    int64_t short_ = tokens - (config.kv_capacity_tokens - used_tokens());
    if (short_ > 0) cache->evict(short_);
}

void Engine::allocate(int64_t tokens) {
    make_free(tokens);
    if (used_tokens() + tokens > config.kv_capacity_tokens)
        throw std::runtime_error("allocation of " + std::to_string(tokens) +
                                 " tokens does not fit: the admission check is wrong");
    reserved += tokens;
}

bool Engine::admission_possible(int64_t taken, int64_t charged) {
    if (int64_t(running.size()) + taken >= config.max_running_requests) return false;
    double r = room() - double(charged);
    if (fits(queue.need.at(queue.of(queue.requests[0])->id), r)) return true;
    int64_t least = queue.smallest_need();
    if (fits(least, r)) return true;
    blocked = least;
    return false;
}

nb::object Engine::schedule_prefill(std::vector<Admission> &batch, nb::handle multipliers, nb::handle remaining) {
    blocked.reset();
    int64_t budget = config.prefill_budget(), charged = 0;
    if (chunked) {
        Admission adm = std::move(*chunked);
        chunked.reset();
        adm.cached = adm.end;
        adm.first = false;
        adm.end = chunk_end(adm.size, adm.cached, budget);
        promised -= adm.extend();  // promised when it was admitted, allocated now
        if (adm.last_chunk()) promised += chunked_output(*adm.r, adm.generated, adm.cap);
        allocate(adm.extend());
        budget -= adm.extend();
        charged = round_charge(adm.extend());
        batch.push_back(std::move(adm));
    }
    if (budget > 0 && nb::len(queue.requests) && admission_possible(int64_t(batch.size()), charged))
        return admit_from_queue(batch, budget, charged, multipliers, remaining);
    return nb::none();
}

nb::object Engine::admit_from_queue(std::vector<Admission> &batch, int64_t budget, int64_t charged,
                                    nb::handle multipliers, nb::handle remaining) {
    nb::object decision;
    nb::object ordered = order(multipliers, remaining, decision);
    nb::object priority = config.reads_priorities ? python().decision_priority(decision) : nb::object();
    std::size_t first = batch.size();
    for (nb::handle obj : ordered) {
        if (int64_t(running.size() + batch.size()) >= config.max_running_requests) break;
        ReqPtr r = queue.of(obj);
        Admission adm;
        int64_t output;
        if (!fit(r, budget, charged, !batch.empty(), adm, output)) break;
        // `_take`: allocate what this prefill computes and what the rules hold, promise the rest.
        adm.generated = adm.size - r->prompt_len;
        adm.held = held(output);
        allocate(adm.end - adm.cached + adm.held);
        output = round_output(*r, adm.generated, adm.cap) - adm.held;
        if (adm.end != adm.size) output -= chunked_output(*r, adm.generated, adm.cap);
        promised += adm.size - adm.end + output;
        adm.priority = priority ? nb::cast<int64_t>(priority(obj)) : 0;
        adm.joined = r->joined;
        int64_t computed = adm.end - adm.cached;
        bool spent = adm.end != adm.size;
        batch.push_back(std::move(adm));
        budget -= computed;
        charged += round_charge(computed);
        if (spent) break;  // the batch's budget is spent
    }
    std::vector<ReqPtr> taken;
    for (std::size_t i = first; i < batch.size(); ++i) taken.push_back(batch[i].r);
    queue.remove(taken);
    return decision;
}

bool Engine::fit(const ReqPtr &r, int64_t budget, int64_t charged, bool later, Admission &adm, int64_t &output) {
    nb::object array;
    int64_t size;
    const int64_t *data = queue.tokens(*r, size, array);
    NodePtr start = prefixes->start(r->obj, size - 1);
    auto [length, node] = cache->match_prefix(radix::Tokens{data, size - 1, array}, start);
    int64_t extend = size - length, end = size;
    if (config.chunking && extend > budget) {
        end = chunk_end(end, length, budget);
        if (end <= length) return false;
    } else if (!config.chunking && later && config.paged(extend) >= budget) {
        return false;  // only the first request may reach max_prefill_tokens (SGLang's `>=`, in pages)
    }
    int64_t c = cap(*r);
    output = output_need(*r, size - r->prompt_len, c);
    int64_t need = extend + output;
    cache->lock(node);
    if (!fits(need, room() - double(charged))) {
        cache->unlock(node);
        blocked = need;
        return false;
    }
    adm = Admission{r, array, data, size, node, length, end, c, 0, true, 0, 0, 0};
    return true;
}

namespace {

// policy.WaitingRound(queue, cache, multipliers, remaining, changes, length_of) as its __init__
// makes it, slot by slot without that Python frame (every admission round makes one; slot_fill.hpp,
// docs/engine.md section 8), while the class is built as policy.py builds it: its own __init__
// (`policy._WAITING_ROUND_INIT`), object's __new__ and allocator, a plain slot for each attribute
// __init__ sets. Otherwise the class is called.
class RoundMaker {
public:
    explicit RoundMaker(nb::handle cls)
        : cls_(cls),
          init_(nb::module_::import_("auction_gym.policy").attr("_WAITING_ROUND_INIT")),
          slots_(cls, {"queue", "cache", "multipliers", "remaining", "changes", "_length_of", "_lens"}) {}

    nb::object operator()(const std::array<nb::handle, 6> &given) {
        if (as_defined()) {
            nb::object round = slots_.make({given[0], given[1], given[2], given[3], given[4], given[5], nb::none()});
            if (round.is_valid()) return round;
        }
        return cls_(given[0], given[1], given[2], given[3], given[4], given[5]);
    }

private:
    bool as_defined() const {
        PyTypeObject *type = reinterpret_cast<PyTypeObject *>(cls_.ptr());
        static PyObject *const init_name = PyUnicode_InternFromString("__init__");
        return Py_TYPE(type) == &PyType_Type && type->tp_new == PyBaseObject_Type.tp_new &&
               type->tp_alloc == PyType_GenericAlloc && _PyType_Lookup(type, init_name) == init_.ptr();
    }

    nb::handle cls_;
    nb::object init_;
    pyslots::SlotMaker<7> slots_;
};

}  // namespace

nb::object Engine::order(nb::handle multipliers, nb::handle remaining, nb::object &decision) {
    const Python &py = python();
    ++rounds;
    nb::list waiting = queue.requests;
    nb::object changes = prefixes->refresh(waiting, cache_object, queue.take_changes());
    note_matches();
    static RoundMaker *make_round = new RoundMaker(py.waiting_round);  // never freed, as `python()`
    nb::object round = (*make_round)({waiting, cache_object, multipliers, remaining, changes,
                                      prefixes->matcher.length_of});
    bool holds = in_batch_deprioritized(waiting);
    nb::object got = call_method(scheduler, py.names.admit, round);
    if (!PyTuple_CheckExact(got.ptr()) || PyTuple_GET_SIZE(got.ptr()) != 2) got = py.unpack_admission(got);
    nb::object ordered = nb::borrow(PyTuple_GET_ITEM(got.ptr(), 0));
    decision = nb::borrow(PyTuple_GET_ITEM(got.ptr(), 1));
    std::size_t n = nb::len(ordered), m = nb::len(waiting);
    if (n != m)
        throw std::runtime_error("scheduler " + nb::cast<std::string>(nb::repr(scheduler.attr("name"))) +
                                 " returned " + std::to_string(n) + " of " + std::to_string(m) + " requests");
    check_permutation(ordered, waiting);
    // Nothing changes the order while admission reads it, so the policy's own is read where none
    // is held (Python reads a copy).
    nb::object out = holds ? nb::object(behind(ordered, waiting, waiting_as_read(waiting))) : ordered;
    if (truthy(scheduler.attr(py.names.sorts_in_place))) queue.reorder(out);  // SGLang keeps it for the next round
    return out;
}

// in_batch.behind: the held ones at the end, in queue order. `as_read`: the waiting list is the one
// the in-batch check read (`waiting_as_read`), whose requests it kept.
nb::list Engine::behind(nb::handle ordered, nb::handle waiting, bool as_read) {
    const Py_ssize_t m = PyList_GET_SIZE(waiting.ptr());
    auto held = [&](Py_ssize_t i) {
        return (as_read ? read_reqs[std::size_t(i)] : queue.of(PyList_GET_ITEM(waiting.ptr(), i)).get())->held_in ==
               rounds;
    };
    if (!PyList_CheckExact(ordered.ptr())) {
        // `of`, not `find`: reading an order other than a list runs Python code, which may read
        // otherwise the second time or change the waiting list.
        nb::list out;
        for (nb::handle r : ordered)
            if (queue.of(r)->held_in != rounds) out.append(r);
        for (Py_ssize_t i = 0; i < m; ++i)
            if (held(i)) out.append(nb::handle(PyList_GET_ITEM(waiting.ptr(), i)));
        return out;
    }
    // A list the permutation check found the requests of, no Python run since: a permutation of
    // the waiting list, so the held ones moved back make a list as long.
    nb::list out = nb::steal<nb::list>(PyList_New(m));
    if (!out.is_valid()) throw nb::python_error();
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < m; ++i)
        if (ordered_reqs[std::size_t(i)]->held_in != rounds)
            PyList_SET_ITEM(out.ptr(), k++, Py_NewRef(PyList_GET_ITEM(ordered.ptr(), i)));
    for (Py_ssize_t i = 0; i < m; ++i)
        if (held(i)) PyList_SET_ITEM(out.ptr(), k++, Py_NewRef(PyList_GET_ITEM(waiting.ptr(), i)));
    return out;
}

// A request ordered twice would be admitted twice: refused, as the Python engine refuses it. The
// order has as many requests as the queue: all distinct and waiting, it is a permutation of it.
// Python compares it with the waiting list as the policy left it (the round hands the policy that
// list), so each request there must be one ordered too.
void Engine::check_permutation(nb::handle ordered, nb::handle waiting) {
    auto refuse = [&]() {
        throw std::runtime_error("scheduler " + nb::cast<std::string>(nb::repr(scheduler.attr("name"))) +
                                 " returned an order that is not a permutation of the waiting queue");
    };
    auto mark = [&](nb::handle r) {
        Req *q = queue.find(r);
        if (!q || q->ordered_in == rounds) refuse();
        q->ordered_in = rounds;
        return q;
    };
    const Py_ssize_t m = PyList_GET_SIZE(waiting.ptr());
    if (PyList_CheckExact(ordered.ptr())) {  // read in place: nothing here runs Python
        const Py_ssize_t n = PyList_GET_SIZE(ordered.ptr());
        ordered_reqs.resize(std::size_t(n));
        for (Py_ssize_t i = 0; i < n; ++i) ordered_reqs[std::size_t(i)] = mark(PyList_GET_ITEM(ordered.ptr(), i));
        PyObject *const *items = PySequence_Fast_ITEMS(ordered.ptr());
        if (n == m && std::equal(items, items + n, PySequence_Fast_ITEMS(waiting.ptr())))
            return;  // the queue's own order: its requests are the ones just marked
    } else {
        for (nb::handle r : ordered) mark(r);
    }
    const bool as_read = waiting_as_read(waiting);
    for (Py_ssize_t i = 0; i < m; ++i) {
        const Req *q = as_read ? read_reqs[std::size_t(i)] : queue.find(PyList_GET_ITEM(waiting.ptr(), i));
        if (!q || q->ordered_in != rounds) refuse();
    }
}

// Whether `waiting` holds the objects the in-batch check of this round read, in their order, and
// the queue's table is as it was then: the requests it found are the ones waiting now.
bool Engine::waiting_as_read(nb::handle waiting) const {
    const std::size_t n = std::size_t(PyList_GET_SIZE(waiting.ptr()));
    return read_in == rounds && read_edits == queue.edits() && n == read_items.size() &&
           std::equal(read_items.begin(), read_items.end(), PySequence_Fast_ITEMS(waiting.ptr()));
}

// The refreshed requests' cached lengths (`matcher.added`: new, or matched again) copied to their
// `Req::matched`, which the in-batch check reads.
void Engine::note_matches() {
    if (!config.in_batch) return;
    const radix::PrefixMatcher &matcher = prefixes->matcher;
    for (nb::handle rid : matcher.added) {
        PyObject *obj = PyDict_GetItemWithError(matcher.requests.ptr(), rid.ptr());  // borrowed
        if (!obj) {
            if (PyErr_Occurred()) throw nb::python_error();
            continue;
        }
        if (Req *r = queue.find(obj)) r->matched = matcher.length(r->id);
    }
}

// in_batch.deprioritized: marks the requests with few cached tokens whose head an earlier one has
// (`held_in`); whether it marked any. The requests it finds are kept (`read_reqs`) for the round's
// checks of the order.
bool Engine::in_batch_deprioritized(nb::handle waiting) {
    if (!config.in_batch ||
        !truthy(call_method(scheduler, python().names.in_batch_deprioritizes, nb::int_(nb::len(waiting)))))
        return false;
    const std::size_t n = std::size_t(PyList_GET_SIZE(waiting.ptr()));
    read_items.assign(PySequence_Fast_ITEMS(waiting.ptr()), PySequence_Fast_ITEMS(waiting.ptr()) + n);
    read_reqs.resize(n);
    read_in = rounds;
    read_edits = queue.edits();
    heads.clear(n);
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) {  // runs no Python: read in place
        Req *r = read_reqs[i] = queue.find(read_items[i]);
        if (!r) {  // an object a policy put in the waiting list: Python's read of its cached length raises
            read_in = 0;
            nb::object(prefixes->matcher.length_of[nb::handle(read_items[i])]);
            throw std::runtime_error("a waiting request the engine does not hold");
        }
        if (r->matched > config.in_batch_check) continue;
        std::optional<std::string_view> h = queue.head(*r, config.in_batch_threshold);
        if (!h) continue;  // too short to share enough with anything
        if (r->head_epoch != heads.epoch) {
            r->head = heads.number(*h);
            r->head_epoch = heads.epoch;
        }
        if (heads.insert(r->head)) {
            r->held_in = rounds;
            any = true;
        }
    }
    return any;
}

void Engine::run_prefill(std::vector<Admission> &batch, Ids &admitted, Ids &resumed) {
    double start = now;
    int64_t new_tokens = 0;
    double attention = 0;
    for (const Admission &adm : batch) {  // sim_engine.prefill_work
        int64_t extend = adm.extend();
        new_tokens += extend;
        attention += double(extend) * (double(adm.cached) + double(extend) / 2);
    }
    now += config.prefill_time(new_tokens, attention);
    const Names &name = python().names;
    for (Admission &adm : batch) {
        const Req &r = *adm.r;
        nb::object rec = record(r);
        if (adm.first) {
            (adm.generated ? resumed : admitted).push_back(r.id);
            if (!adm.generated) {
                rec.attr(name.admit) = start;
                rec.attr(name.cached_tokens) = adm.cached;
            }
        }
        int64_t extend = adm.extend();
        add_to(rec, name.computed_tokens, extend);
        NodePtr node = cache->insert(radix::Tokens{adm.data, adm.end, adm.tokens}, nb::none(), adm.node, 0,
                                     adm.priority).second;
        cache->move_lock(adm.node, node);
        reserved -= extend - (adm.end - node->depth);  // in the cache now, bar a partial page
        if (adm.last_chunk()) {
            if (adm.generated) protect_prompt(node, r, adm.priority);
            start_running(adm, node);
        } else {
            adm.node = node;
            chunked = adm;
        }
    }
}

void Engine::start_running(Admission &adm, const NodePtr &node) {
    const Req &r = *adm.r;
    int64_t emitted = adm.generated + 1;
    auto run = std::make_shared<Run>(Run{adm.r, record(r), node, steps + r.output_len - emitted, adm.end - node->depth + adm.held,
                                         steps, emitted, adm.cap, adm.priority, adm.joined});
    promised -= joined_rule(r, adm.generated, adm.cap, emitted, steps);
    if (!adm.generated) run->record.attr(python().names.first_token) = now;
    heappush(finishing, {{run->done_at, r.id}, run}, by_done);
    context += adm.size + 1;
    running.push_back(run);
}

void Engine::release() {
    scheduler = nb::none();
    arrivals.records = nb::dict();
    arrivals.source = arrivals.upstream = nb::none();
    queue.requests = nb::list();  // visited by the collector too: a waiting request may hold the engine
}

// The lists are made at their sizes: the market reads the requests in the system every step.
nb::list Engine::in_system() const {
    PyObject *waiting = queue.requests.ptr();
    Py_ssize_t n = PyList_GET_SIZE(waiting);
    nb::list out = nb::steal<nb::list>(PyList_New(n + Py_ssize_t(chunked.has_value()) + Py_ssize_t(running.size())));
    if (!out.is_valid()) throw nb::python_error();
    Py_ssize_t at = 0;
    auto put = [&](PyObject *r) { PyList_SET_ITEM(out.ptr(), at++, Py_NewRef(r)); };
    for (Py_ssize_t i = 0; i < n; ++i) put(PyList_GET_ITEM(waiting, i));
    if (chunked) put(chunked->r->obj.ptr());
    for (const RunPtr &run : running) put(run->r->obj.ptr());
    return out;
}

nb::list Engine::running_requests() const {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(running.size())));
    if (!out.is_valid()) throw nb::python_error();
    for (std::size_t i = 0; i < running.size(); ++i)
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), Py_NewRef(running[i]->r->obj.ptr()));
    return out;
}

int64_t Engine::active_tokens() const {
    int64_t total = context;
    for (nb::handle r : queue.requests) total += queue.of(r)->prompt_len;
    return total;
}

}  // namespace engine
