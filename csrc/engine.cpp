// The compiled engine's iteration: serving_engine.ServingEngine.step and sim_engine.SimEngine, with
// the rules of rules.py (engine.hpp), each method following the Python one of the same name.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/shared_ptr.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "engine.hpp"

namespace engine {

namespace {

const auto by_done = [](const std::pair<std::pair<int64_t, int64_t>, RunPtr> &a,
                        const std::pair<std::pair<int64_t, int64_t>, RunPtr> &b) { return a.first < b.first; };

// A read-only int64 array holding `tokens` (a reply the workload does not know, or a sequence the
// engine put together): the cache may keep a view of it as an edge's tokens.
nb::object array_of(std::vector<int64_t> tokens) {
    auto *owned = new std::vector<int64_t>(std::move(tokens));
    nb::capsule owner(owned, [](void *p) noexcept { delete static_cast<std::vector<int64_t> *>(p); });
    size_t shape[1] = {owned->size()};
    return nb::cast(nb::ndarray<nb::numpy, const int64_t, nb::ndim<1>>(owned->data(), 1, shape, owner));
}

const int64_t *array_data(nb::handle array) {
    return nb::cast<nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig>>(array, false).data();
}

void add_to(nb::handle record, const char *field, int64_t n) {
    record.attr(field) = nb::cast<int64_t>(record.attr(field)) + n;
}

}  // namespace

Engine::Engine(nb::handle scheduler_, nb::handle config_, nb::handle cache_, nb::handle prefixes_, nb::dict records)
    : config(config_), scheduler(nb::borrow(scheduler_)), config_object(nb::borrow(config_)),
      cache_object(nb::borrow(cache_)), prefixes_object(nb::borrow(prefixes_)),
      cache(radix::compiled_cache(cache_, "the compiled engine")), prefixes(nb::cast<radix::WaitingPrefixes *>(prefixes_)),
      arrivals(std::move(records)), future(config) {}

nb::object Engine::step(nb::handle multipliers, nb::handle remaining) {
    const Python &py = python();
    nb::list rejected = let_in_arrivals();
    double start = now;
    int64_t queue_len = int64_t(nb::len(queue.requests));
    if (queue_len || chunked) {
        std::vector<Admission> batch;
        nb::object decision = schedule_prefill(batch, multipliers, remaining);
        if (!batch.empty()) {
            nb::list admitted, resumed;
            run_prefill(batch, admitted, resumed);
            nb::list finished = retire(pop_finished());
            return py.iteration("prefill", start, now, queue_len, admitted, finished, rejected, 1, resumed, nb::list(),
                                0, decision, nb::list());
        }
    }
    if (!running.empty()) {
        nb::list retracted = make_room();
        nb::list finished;
        int64_t done = decode(nb::len(retracted) > 0, finished);
        return py.iteration("decode", start, now, queue_len, nb::list(), finished, rejected, done, nb::list(),
                            retracted, 0, nb::none(), nb::list());
    }
    if (!config.oracle) future.ratio = future.init;  // SGLang resets the ratio when it idles
    double next = arrivals.next_time();
    if (std::isinf(next)) {
        if (nb::len(rejected) == 0) return nb::none();
        return py.iteration("idle", start, start, queue_len, nb::list(), nb::list(), rejected, 1, nb::list(),
                            nb::list(), 0, nb::none(), nb::list());
    }
    now = std::max(now, next);
    return py.iteration("idle", start, now, queue_len, nb::list(), nb::list(), rejected, 1, nb::list(), nb::list(),
                        0, nb::none(), nb::list());
}

nb::list Engine::let_in_arrivals() {
    nb::list rejected;
    std::vector<ReqPtr> arrived;
    for (const ReqPtr &r : arrivals.due(now)) {
        if (r->output_len > config.output_room(r->prompt_len)) {
            record(*r).attr("rejected") = config_object.attr("rejection")(r->prompt_len, r->output_len);
            rejected.append(r->id);
        } else {
            arrived.push_back(r);
        }
    }
    if (!arrived.empty()) {
        std::vector<int64_t> needs;
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
    nb::list ordered = order(multipliers, remaining, decision);
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
        adm.joined = queue.joined.at(r->id);
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

nb::list Engine::order(nb::handle multipliers, nb::handle remaining, nb::object &decision) {
    nb::list waiting = queue.requests;
    nb::object changes = prefixes->refresh(waiting, cache_object, queue.take_changes());
    nb::object round = python().waiting_round(waiting, cache_object, multipliers, remaining, changes,
                                              prefixes->matcher.length_of);
    std::unordered_set<int64_t> held_back = in_batch_deprioritized(waiting);
    nb::object got = scheduler.attr("admit")(round);
    nb::object ordered = got[0];
    decision = got[1];
    std::size_t n = nb::len(ordered), m = nb::len(waiting);
    if (n != m)
        throw std::runtime_error("scheduler " + nb::cast<std::string>(nb::repr(scheduler.attr("name"))) +
                                 " returned " + std::to_string(n) + " of " + std::to_string(m) + " requests");
    nb::list out;
    if (held_back.empty()) {
        out = nb::list(ordered);
    } else {  // in_batch.behind: the held ones at the end, in queue order
        for (nb::handle r : ordered)
            if (!held_back.count(queue.of(r)->id)) out.append(r);
        for (nb::handle r : waiting)
            if (held_back.count(queue.of(r)->id)) out.append(r);
    }
    if (nb::cast<bool>(scheduler.attr("sorts_in_place"))) queue.reorder(out);  // SGLang keeps it for the next round
    return out;
}

std::unordered_set<int64_t> Engine::in_batch_deprioritized(nb::handle waiting) {
    std::unordered_set<int64_t> out;
    if (!config.in_batch || !nb::cast<bool>(scheduler.attr("in_batch_deprioritizes")(nb::len(waiting)))) return out;
    // in_batch.deprioritized: the requests with few cached tokens whose head an earlier one has
    nb::dict length_of = prefixes->matcher.length_of;
    std::unordered_set<std::string> heads;
    for (nb::handle obj : waiting) {
        if (nb::cast<int64_t>(length_of[obj]) > config.in_batch_check) continue;
        ReqPtr r = queue.of(obj);
        bool shorter;
        std::string h = queue.head(*r, config.in_batch_threshold, shorter);
        if (shorter) continue;  // too short to share enough with anything
        if (!heads.insert(std::move(h)).second) out.insert(r->id);
    }
    return out;
}

void Engine::run_prefill(std::vector<Admission> &batch, nb::list &admitted, nb::list &resumed) {
    double start = now;
    int64_t new_tokens = 0;
    double attention = 0;
    for (const Admission &adm : batch) {  // sim_engine.prefill_work
        int64_t extend = adm.extend();
        new_tokens += extend;
        attention += double(extend) * (double(adm.cached) + double(extend) / 2);
    }
    now += config.prefill_time(new_tokens, attention);
    for (Admission &adm : batch) {
        const Req &r = *adm.r;
        nb::object rec = record(r);
        if (adm.first) {
            (adm.generated ? resumed : admitted).append(r.id);
            if (!adm.generated) {
                rec.attr("admit") = start;
                rec.attr("cached_tokens") = adm.cached;
            }
        }
        int64_t extend = adm.extend();
        add_to(rec, "computed_tokens", extend);
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
    if (!adm.generated) run->record.attr("first_token") = now;
    heappush(finishing, {{run->done_at, r.id}, run}, by_done);
    context += adm.size + 1;
    running.push_back(run);
}

// Decode and retraction (step 3).

nb::list Engine::make_room() {
    nb::list retracted;
    if (free_and_evictable() >= decode_tokens(int64_t(running.size()))) return retracted;
    int64_t step = steps;
    std::vector<RunPtr> keep(running);
    std::stable_sort(keep.begin(), keep.end(), [step](const RunPtr &a, const RunPtr &b) {
        int64_t ga = a->generated(step), gb = b->generated(step);
        return ga > gb || (ga == gb && -a->r->prompt_len > -b->r->prompt_len);
    });
    std::vector<int64_t> gone;
    while (keep.size() > 1 && (gone.empty() || free_and_evictable() < decode_tokens(int64_t(keep.size())))) {
        RunPtr run = keep.back();
        keep.pop_back();
        retract(run, int64_t(keep.size()));
        gone.push_back(run->r->id);
        retracted.append(run->r->id);
    }
    if (free_and_evictable() < decode_tokens(int64_t(keep.size())))
        throw std::runtime_error("a lone running request does not fit: kv_capacity_tokens admission check is wrong");
    forget(gone);
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
    reserved -= run->held + left(*run, step, step);
    context -= r.prompt_len + generated;
    cache->unlock(run->node);
    remove_running(run);
    add_to(run->record, "retractions", 1);
    nb::object output = output_tokens(r);
    std::vector<int64_t> tokens(r.data, r.data + r.prompt_len);
    const int64_t *out = array_data(output);
    tokens.insert(tokens.end(), out, out + generated);
    queue.put_back(run->r, array_of(std::move(tokens)), smallest_need(r, generated, run->cap));
    make_free(still_running * config.retract_decode_steps);
}

int64_t Engine::decode(bool retracted, nb::list &finished) {
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
    if (std::isinf(dt)) return int64_t(1) << 62;
    double q = config.decode_per_context_token * double(batch);
    // T(k) = a k + q k (k - 1) / 2 is increasing; solve T(k) = dt, then fix rounding.
    double k_real;
    if (q == 0) {
        k_real = std::ceil(dt / a);
    } else {
        double b = a - q / 2;
        k_real = std::ceil((-b + std::sqrt(b * b + 2 * q * dt)) / q);
    }
    int64_t k = std::max(int64_t(k_real), int64_t(1));
    while (k > 1 && config.decode_steps_after(a, k - 1, batch) >= dt) --k;
    while (config.decode_steps_after(a, k, batch) < dt) ++k;
    return k;
}

std::vector<RunPtr> Engine::pop_finished() {
    std::vector<RunPtr> done;
    while (!finishing.empty() && finishing[0].first.first <= steps) done.push_back(heappop(finishing, by_done).second);
    return done;
}

nb::list Engine::retire(const std::vector<RunPtr> &done) {
    nb::list ids;
    for (const RunPtr &run : done) {
        const Req &r = *run->r;
        // The memory is released before the insert that fills it, so the insert fits.
        reserved -= run->held + left(*run, run->done_at, steps);
        context -= r.prompt_len + r.output_len;
        cache_finished(*run);
        protect_prompt(run->node, r, run->priority);
        cache->unlock(run->node);
        run->record.attr("finish") = now;
        remove_running(run);
    }
    for (const RunPtr &run : done) ids.append(run->r->id);
    return ids;
}

nb::object Engine::output_tokens(const Req &r) const {
    if (!r.output_tokens.is_none()) return r.output_tokens;
    // serving_engine.synthetic_output: ids from 2**40 up, distinct per request
    int64_t start = (int64_t(1) << 40) + (r.id << 24);
    std::vector<int64_t> out(std::size_t(r.output_len));
    for (int64_t i = 0; i < r.output_len; ++i) out[std::size_t(i)] = start + i;
    return array_of(std::move(out));
}

void Engine::cache_finished(const Run &run) {
    const Req &r = *run.r;
    const NodePtr &node = run.node;
    nb::object output = output_tokens(r);
    const int64_t *out = array_data(output);
    int64_t out_len = r.output_len - 1;  // bar the last output token (never computed)
    if (!node->alive) throw nb::value_error("extend from an evicted node");
    int64_t skip = node->depth - r.prompt_len;
    if (skip >= 0) {
        cache->insert(radix::Tokens{out + skip, out_len - skip, output}, nb::none(), node, node->depth, run.priority);
        return;
    }
    std::vector<int64_t> rest(r.data + node->depth, r.data + r.prompt_len);
    rest.insert(rest.end(), out, out + out_len);
    nb::object joined = array_of(std::move(rest));
    cache->insert(radix::Tokens{array_data(joined), int64_t(nb::len(joined)), joined}, nb::none(), node, node->depth,
                  run.priority);
}

void Engine::protect_prompt(NodePtr node, const Req &r, int64_t priority) {
    if (!cache->by_priority) return;
    int64_t end = r.prompt_len - r.prompt_len % config.page_size;
    while (node->depth > end) node = node->parent;
    if (node->depth == end) cache->raise_priority(node, priority + 1);
}

void Engine::remove_running(const RunPtr &run) {
    running.erase(std::find(running.begin(), running.end(), run));
}

// The rules where SGLang's and the oracle's differ in more than a number.

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

void Engine::release() {
    scheduler = nb::none();
    arrivals.records = nb::dict();
    arrivals.source = arrivals.upstream = nb::none();
}

nb::list Engine::in_system() const {
    nb::list out;
    for (nb::handle r : queue.requests) out.append(r);
    if (chunked) out.append(chunked->r->obj);
    for (const RunPtr &run : running) out.append(run->r->obj);
    return out;
}

nb::list Engine::running_requests() const {
    nb::list out;
    for (const RunPtr &run : running) out.append(run->r->obj);
    return out;
}

int64_t Engine::active_tokens() const {
    int64_t total = context;
    for (nb::handle r : queue.requests) total += queue.of(r)->prompt_len;
    return total;
}

}  // namespace engine
