// The compiled engine's decode steps, retraction and retirement (serving_engine.py's step 3 and
// sim_engine.SimEngine's decode timing), and the rules where SGLang's and the oracle's differ in
// more than a number (rules.py), each following the Python method of the same name.

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "engine.hpp"
#include "token_array.hpp"

namespace engine {

namespace {

// Tokens the engine made for the cache alone, owned by a capsule (no numpy array: nothing reads
// them but the cache's edges); `data` is set to them.
nb::object made_tokens(std::vector<int64_t> tokens, const int64_t *&data) {
    auto *owned = new std::vector<int64_t>(std::move(tokens));
    data = owned->data();
    return nb::capsule(owned, [](void *p) noexcept { delete static_cast<std::vector<int64_t> *>(p); });
}

}  // namespace

Ids Engine::make_room() {
    Ids retracted;
    if (free_and_evictable() >= decode_tokens(int64_t(running.size()))) return retracted;
    int64_t step = steps;
    std::vector<RunPtr> keep(running);
    std::stable_sort(keep.begin(), keep.end(), [step](const RunPtr &a, const RunPtr &b) {
        int64_t ga = a->generated(step), gb = b->generated(step);
        return ga > gb || (ga == gb && -a->r->prompt_len > -b->r->prompt_len);
    });
    while (keep.size() > 1 && (retracted.empty() || free_and_evictable() < decode_tokens(int64_t(keep.size())))) {
        RunPtr run = keep.back();
        keep.pop_back();
        retract(run, int64_t(keep.size()));
        retracted.push_back(run->r->id);
    }
    if (free_and_evictable() < decode_tokens(int64_t(keep.size())))
        throw std::runtime_error("a lone running request does not fit: kv_capacity_tokens admission check is wrong");
    forget(retracted);
    if (!config.oracle) {  // SGLang re-estimates the ratio as if every request left runs retract_decode_steps more
        int64_t emitted = 0, caps = 0, n = int64_t(keep.size());
        for (const RunPtr &run : keep) {
            emitted += run->generated(step);
            caps += run->cap;
        }
        future.ratio = std::min(1.0, double(emitted + config.retract_decode_steps * n) / double(caps + 1));
    }
    return retracted;
}

void Engine::forget(const std::vector<int64_t> &gone) {
    std::unordered_set<int64_t> ids(gone.begin(), gone.end());
    finishing.erase(std::remove_if(finishing.begin(), finishing.end(),
                                   [&](const auto &e) { return ids.count(e.first.second) > 0; }),
                    finishing.end());
    heapify(finishing, by_done);
}

void Engine::retract(const RunPtr &run, int64_t still_running) {
    const Req &r = *run->r;
    int64_t step = steps, generated = run->generated(step);
    const int64_t *out;
    nb::object output = output_tokens(r, out);  // before any change: it may raise
    reserved -= run->held + left(*run, step, step);
    context -= r.prompt_len + generated;
    cache->unlock(run->node);
    remove_running(run);
    add_to(run->record, python().names.retractions, 1);
    std::vector<int64_t> tokens(r.data, r.data + r.prompt_len);
    tokens.insert(tokens.end(), out, out + generated);
    queue.put_back(run->r, array_of(std::move(tokens)), smallest_need(r, generated, run->cap));
    make_free(still_running * config.retract_decode_steps);
}

int64_t Engine::decode(bool retracted, Ids &finished) {
    int64_t n = int64_t(running.size());
    // SimEngine._execute_decode
    double first = config.decode_time(n, context);  // one step's time, which every count below starts from
    int64_t count = decode_limit();
    // With every running slot taken an arrival waits for a finish anyway: decoding need not stop for it.
    if (n < config.max_running_requests)
        count = std::min(count, steps_until(arrivals.next_possible() - now, n, first));
    double seconds = config.decode_steps_after(first, count, n);
    // One eviction for every step's tokens: nothing touches the cache between steps.
    allocate(count * decode_tokens(n));
    if (!config.oracle) future.decayed(count - retracted);  // SGLang decays after every step but a retracting one
    now += seconds;
    steps += count;
    context += count * n;
    finished = retire(pop_finished());
    return count;
}

int64_t Engine::decode_limit() {
    int64_t limit = finishing[0].first.first - steps;
    int64_t n = int64_t(running.size()), free = free_and_evictable();
    std::optional<int64_t> blocking = n < config.max_running_requests ? blocked : std::nullopt;
    return rules_decode_limit(limit, n, free, blocking, free - promised, steps);
}

int64_t Engine::steps_until(double dt, int64_t batch, double a) const {
    if (dt <= 0) return 1;
    const int64_t never = int64_t(1) << 62;  // Python's bound too: a count past it never ends
    if (std::isinf(dt)) return never;
    double q = config.decode_per_context_token * double(batch);
    // T(k) = a k + q k (k - 1) / 2 is increasing; solve T(k) = dt, then fix rounding. A root
    // beyond `never` (free steps, or so cheap that it overflows to inf) is `never`.
    double root;
    if (q == 0) {
        root = a > 0 ? dt / a : INFINITY;
    } else {
        double b = a - q / 2;
        root = (-b + std::sqrt(b * b + 2 * q * dt)) / q;
    }
    int64_t k = root < double(never) ? std::max(int64_t(std::ceil(root)), int64_t(1)) : never;
    while (k > 1 && config.decode_steps_after(a, k - 1, batch) >= dt) --k;
    while (k < never && config.decode_steps_after(a, k, batch) < dt) ++k;
    return k;
}

std::vector<RunPtr> Engine::pop_finished() {
    std::vector<RunPtr> done;
    while (!finishing.empty() && finishing[0].first.first <= steps) done.push_back(heappop(finishing, by_done).second);
    return done;
}

Ids Engine::retire(const std::vector<RunPtr> &done) {
    Ids ids;
    std::vector<std::pair<nb::object, const int64_t *>> outputs(done.size());
    for (std::size_t i = 0; i < done.size(); ++i)  // before any change: it may raise
        outputs[i].first = output_tokens(*done[i]->r, outputs[i].second);
    for (std::size_t i = 0; i < done.size(); ++i) {
        const RunPtr &run = done[i];
        const Req &r = *run->r;
        // The memory is released before the insert that fills it, so the insert fits.
        reserved -= run->held + left(*run, run->done_at, steps);
        context -= r.prompt_len + r.output_len;
        cache_finished(*run, outputs[i].first, outputs[i].second);
        protect_prompt(run->node, r, run->priority);
        cache->unlock(run->node);
        run->record.attr(python().names.finish) = now;
        remove_running(run);
    }
    for (const RunPtr &run : done) ids.push_back(run->r->id);
    return ids;
}

nb::object Engine::output_tokens(const Req &r, const int64_t *&data) const {
    if (!r.output_tokens.is_none()) {
        data = r.output;
        return r.output_tokens;
    }
    // serving_engine.synthetic_output: ids from 2**40 up, distinct per request
    __int128 start = (__int128(1) << 40) + __int128(r.id) * (int64_t(1) << 24);
    if (start < INT64_MIN || start > INT64_MAX) {  // where numpy's arange refuses the start
        PyErr_SetString(PyExc_OverflowError, ("request " + std::to_string(r.id) +
                                              ": its synthetic reply starts past int64").c_str());
        throw nb::python_error();
    }
    std::vector<int64_t> out(std::size_t(r.output_len));
    for (int64_t i = 0; i < r.output_len; ++i)  // wrapping past int64's end, as numpy's does
        out[std::size_t(i)] = int64_t(uint64_t(int64_t(start)) + uint64_t(i));
    return made_tokens(std::move(out), data);
}

void Engine::cache_finished(const Run &run, const nb::object &output, const int64_t *out) {
    const Req &r = *run.r;
    const NodePtr &node = run.node;
    int64_t out_len = r.output_len - 1;  // bar the last output token (never computed)
    if (!node->alive) throw nb::value_error("extend from an evicted node");
    int64_t skip = node->depth - r.prompt_len;
    bool made = r.output_tokens.is_none();  // the reply output_tokens made up
    if (skip >= 0) {
        cache->insert(radix::Tokens{out + skip, out_len - skip, output, made}, nb::none(), node, node->depth,
                      run.priority);
        return;
    }
    std::vector<int64_t> rest(r.data + node->depth, r.data + r.prompt_len);
    rest.insert(rest.end(), out, out + out_len);
    int64_t size = int64_t(rest.size());
    const int64_t *data;
    nb::object joined = made_tokens(std::move(rest), data);
    cache->insert(radix::Tokens{data, size, joined, true}, nb::none(), node, node->depth, run.priority);
}

void Engine::protect_prompt(NodePtr node, const Req &r, int64_t priority) {
    if (!cache->by_priority) return;
    int64_t end = r.prompt_len - r.prompt_len % config.page_size;
    while (node->depth > end) node = node->parent;
    if (node->depth == end) cache->raise_priority(node, priority + 1);
}

void Engine::remove_running(const RunPtr &run) {
    auto found = std::find(running.begin(), running.end(), run);
    if (found == running.end()) throw std::logic_error("request " + std::to_string(run->r->id) + " is not running");
    running.erase(found);
}

// The rules (rules.py)

int64_t Engine::chunk_end(int64_t length, int64_t cached, int64_t budget) const {
    if (length - cached <= budget) return length;
    int64_t end = cached + budget;
    return end - end % config.page_size;
}

int64_t Engine::joined_rule(const Req &r, int64_t generated, int64_t cap, int64_t emitted, int64_t step) {
    if (config.oracle) return 0;  // its output is held, not promised
    future.add(r.id, cap - emitted, step);
    return round_output(r, generated, cap);
}

int64_t Engine::left(const Run &run, int64_t produced, int64_t step) {
    if (config.oracle) return 0;  // its output is in `held`
    future.remove(run.r->id, step);
    return produced - run.first_step;
}

int64_t Engine::rules_decode_limit(int64_t limit, int64_t n, int64_t free, std::optional<int64_t> blocking,
                                   int64_t base, int64_t step) {
    if (config.oracle) return limit;  // decode changes neither memory nor the room
    limit = std::min(limit, floordiv(free, n));
    return blocking ? steps_until_fits(*blocking, limit, n, base, step) : limit;
}

int64_t Engine::steps_until_fits(int64_t need, int64_t limit, int64_t n, int64_t base, int64_t step) {
    for (int64_t t = 1; t <= limit; ++t) {
        if (fits(need, double(base - n * t) - future.offset_after(step, t))) return t;
        if (future.ratio - double(t) * future.decay <= future.floor) return limit;
    }
    return limit;
}

}  // namespace engine
