// The compiled simulated engine: auction_gym/engine/serving_engine.py and sim_engine.py (one
// iteration, admission, retraction, decode), rules.py (SGLangRules, OracleRules, FutureOutput),
// queue.py (WaitingQueue), arrivals.py and in_batch.py operation for operation, on the compiled
// radix cache and waiting prefixes (docs/engine.md section 8). The Python modules' docstrings state
// the semantics; this follows their code, name for name. The Python objects it makes or hands on
// (requests, records, iterations, the policy's order and decision) are what the Python engine's
// are; its running batch is read as a list of requests, not of the Python engine's `Running` records.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "address_table.hpp"

#include "radix_cache.hpp"
#include "heapq.hpp"
#include "py_calls.hpp"
#include "waiting_prefixes.hpp"

namespace engine {

namespace nb = nanobind;
using radix::NodePtr;

// Python's floor division of ints.
inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

using pycall::call_method;
using heapq::heapify;
using heapq::heappop;
using heapq::heappush;

// A request as the engine reads it: its attributes, read once when it is submitted.
struct Req {
    // tokens and output_tokens (or None) as contiguous int64 arrays, read in place where they are
    // (a copy kept here where not): data and output point into them.
    nb::object obj, tokens, output_tokens;
    const int64_t *data = nullptr, *output = nullptr;
    int64_t id = 0, prompt_len = 0, output_len = 0, max_new_tokens = 0;
    double arrival = 0;
    // The last admission round (Engine::rounds) that ordered it and that held it back (in_batch):
    // marks that save a round's sets of the waiting requests.
    uint64_t ordered_in = 0, held_in = 0;
    // Its in-batch head's number (WaitingQueue::head, HeadSet::number) and the numbering's epoch
    // (0: none), taken once while it waits: its tokens and the config's threshold do not change
    // meanwhile.
    uint64_t head = 0, head_epoch = 0;
    // Its cached length as the waiting prefixes matched it last (their `length_of`), copied here
    // when it is matched (Engine::note_matches) so the in-batch check reads it without a lookup.
    int64_t matched = 0;
    // While it waits: its place in joining order, and what it recomputes where it was retracted
    // (its prompt and output so far: the array, kept alive here, and its data; null otherwise).
    int64_t joined = 0;
    nb::object resumed;
    const int64_t *resumed_data = nullptr;
    int64_t resumed_size = 0;
};
using ReqPtr = std::shared_ptr<Req>;

// EngineConfig and its CostModel, as numbers.
struct Config {
    explicit Config(nb::handle config);
    int64_t kv_capacity_tokens, max_prefill_tokens, max_running_requests, page_size, clip, retract_decode_steps,
        in_batch_check, in_batch_threshold, decay_steps;
    bool chunking, in_batch, oracle, reads_priorities;
    int64_t chunked_prefill_size = 0;
    double init_ratio, min_ratio;
    double prefill_base, prefill_per_token, prefill_per_attention, decode_base, decode_per_request,
        decode_per_context_token, decode_knee, decode_per_request_to_knee;

    int64_t paged(int64_t tokens) const { return -floordiv(-tokens, page_size) * page_size; }
    int64_t output_room(int64_t prompt_len) const { return kv_capacity_tokens - paged(prompt_len) - page_size - 1; }
    int64_t prefill_budget() const {
        return chunking ? std::min(chunked_prefill_size, max_prefill_tokens) : max_prefill_tokens;
    }
    double prefill_time(int64_t new_tokens, double attention) const {
        return prefill_base + prefill_per_token * double(new_tokens) + prefill_per_attention * attention;
    }
    double decode_time(int64_t batch, int64_t context) const;
    double decode_steps_after(double first, int64_t steps, int64_t batch) const {
        return double(steps) * first + decode_per_context_token * double(batch) * double(steps) * double(steps - 1) / 2;
    }
};

// rules.FutureOutput: the running requests' remaining output caps, and the ratio that scales them.
class FutureOutput {
public:
    explicit FutureOutput(const Config &config);
    void add(int64_t rid, int64_t remaining, int64_t step);
    void remove(int64_t rid, int64_t step);
    double offset_after(int64_t step, int64_t t);
    void decayed(int64_t steps) { ratio = std::max(ratio - double(steps) * decay, floor); }

    int64_t clip;
    double init, floor, decay, ratio;

private:
    void settle(int64_t step);
    int64_t sum = 0, count = 0;
    std::vector<std::pair<int64_t, int64_t>> clipped;  // min-heap of (key - clip, request id)
    std::unordered_map<int64_t, std::pair<int64_t, bool>> where;
};

// The waiting requests by their objects (`pycall::AddressTable`), which a round looks up for each
// waiting request, and how many times the table changed.
class RequestTable {
public:
    const ReqPtr *find(PyObject *o) const { return table.find(o); }  // null where `o` does not wait
    void insert(PyObject *o, const ReqPtr &r) {
        table.insert(o, r);
        ++edits;
    }
    void erase(PyObject *o) { edits += table.erase(o); }
    uint64_t edits = 0;  // inserts and erases so far: a Req read before it changed may be gone

private:
    pycall::AddressTable<ReqPtr> table;
};

// queue.WaitingQueue: the waiting requests in joining order (a Python list, the one policies read),
// what a retracted request recomputes, the least need, and the changes since last taken.
class WaitingQueue {
public:
    WaitingQueue();
    const ReqPtr &of(nb::handle r) const;  // a waiting request's state, by its object
    Req *find(nb::handle r) const;  // the same, or null where `r` does not wait
    uint64_t edits() const { return by_object.edits; }
    // What `r` waits to compute, as the array it is read from (which the queue keeps alive while
    // `r` waits) and its data.
    const int64_t *tokens(const Req &r, int64_t &size, nb::object &array) const;
    std::optional<std::string_view> head(const Req &r, int64_t n) const;
    void arrive(const std::vector<ReqPtr> &arrived, const std::vector<int64_t> &needs);
    void put_back(const ReqPtr &r, nb::object tokens, int64_t need);
    nb::object take_changes();
    void reorder(nb::handle order);
    void remove(const std::vector<ReqPtr> &taken);
    int64_t smallest_need();

    nb::list requests;
    std::unordered_map<int64_t, int64_t> need;

private:
    void join(const ReqPtr &r);
    void set_need(int64_t rid, int64_t n);
    std::vector<std::pair<int64_t, int64_t>> heap;  // min-heap of (need, id), with stale entries
    RequestTable by_object;
    int64_t joins = 0;
    nb::dict joined_since;  // Request -> None, in joining order
    nb::set left_since;
};

// arrivals.Arrivals: submitted requests until their arrival time; records made as they are submitted.
class Arrivals {
public:
    explicit Arrivals(nb::dict records) : records(std::move(records)) {}
    void submit(nb::handle requests);
    double next_time() const;
    double next_possible() const;
    int64_t pending() const { return int64_t(heap.size()) + (lookahead != nullptr); }
    nb::list pending_requests() const;
    std::vector<ReqPtr> due(double now);

    nb::dict records;
    nb::object upstream = nb::none(), source = nb::none();

private:
    struct Entry {
        double arrival;
        int64_t id;
        ReqPtr r;
    };
    static constexpr auto by_entry = [](const Entry &a, const Entry &b) {
        return a.arrival < b.arrival || (a.arrival == b.arrival && a.id < b.id);
    };
    static ReqPtr read(nb::handle r);
    ReqPtr record(nb::handle r, ReqPtr read_already = nullptr);  // read_already: read(r), where the caller made it
    void advance_source();
    std::vector<Entry> heap;
    ReqPtr lookahead;
};

struct Admission {
    ReqPtr r;
    nb::object tokens;  // what the prefill computes: the prompt, or prompt + output so far
    const int64_t *data;
    int64_t size;
    NodePtr node;
    int64_t cached, end, cap, generated;
    bool first;
    int64_t held, priority, joined;
    int64_t extend() const { return end - cached; }
    bool last_chunk() const { return end == size; }
};

struct Run {
    ReqPtr r;
    nb::object record;  // its record when it joined the batch
    NodePtr node;
    int64_t done_at, held, first_step, emitted, cap, priority, joined;
    int64_t generated(int64_t step) const { return emitted + step - first_step; }
};
using RunPtr = std::shared_ptr<Run>;

// An iteration's kind: `none` where the workload ran dry (`step` answers None).
enum class Kind { none, prefill, decode, idle };

using Ids = std::vector<int64_t>;

// One iteration as `step` reports it (state.Iteration's fields), before it is made a Python object
// (the market's calls make none, and lists only of what they return).
struct Step {
    Kind kind = Kind::none;
    double start = 0, end = 0;
    int64_t queue_len = 0, done = 1;
    Ids admitted, finished, rejected, resumed, retracted;
    nb::object decision = nb::none();
};

// What the market adds up over its iterations (market.py's `Market._advance`): the busy seconds
// and the admissions behind seconds_per_unit.
struct RoundTally {
    double busy_time;
    int64_t admitted_total;
    void add(const Step &s);
};

// The heads an in-batch check has seen (in_batch.deprioritized's set): each distinct head's bytes
// numbered once (a waiting request keeps its head's number, `Req::head`) and a check's set a stamp
// per number, so a round neither hashes nor compares the bytes of a head numbered before. The
// numbers are forgotten (a new `epoch`) once they far outnumber the waiting requests.
class HeadSet {
public:
    void clear(std::size_t waiting);          // a new check, over `waiting` requests
    uint64_t number(std::string_view bytes);  // the head's number, given on first sight
    bool insert(uint64_t head);               // whether this check saw it before
    uint64_t epoch = 1;

private:
    std::deque<std::string> bytes_of;  // each number's bytes, which `numbers`' keys view
    std::unordered_map<std::string_view, uint64_t> numbers;
    std::vector<uint64_t> seen;  // each number's last check, 0 for none
    uint64_t check = 0;
};

// ServingEngine + SimEngine with the rules of `config.reservation` (the priority preemption left out:
// the facade keeps the Python engine for it).
class Engine {
public:
    Engine(nb::handle scheduler, nb::handle config, nb::handle cache, nb::handle waiting_prefixes, nb::dict records);
    nb::object step(nb::handle multipliers, nb::handle remaining);
    nb::tuple play_round(nb::handle multipliers, nb::handle remaining, double busy_time, int64_t admitted_total);
    nb::tuple warm_up(double until, nb::handle multipliers, double busy_time, int64_t admitted_total);
    nb::list in_system() const;
    // The requests `in_system` lists, in its order (waiting, chunked, running): for a reader in C++
    // (the market's latency accrual, market_books.cpp) that needs no list of them. Read by index,
    // sizes read again at each: `f` may run Python code (a request's property).
    template <class F> void for_each_held(F &&f) const {
        PyObject *waiting = queue.requests.ptr();
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(waiting); ++i) f(PyList_GET_ITEM(waiting, i));
        if (chunked) f(chunked->r->obj.ptr());
        for (std::size_t i = 0; i < running.size(); ++i) f(running[i]->r->obj.ptr());
    }
    nb::list running_requests() const;
    // The Python objects it holds, for the garbage collector (a policy or a lazily read workload
    // may hold the engine's owner): `release` lets go of those that may hold it back.
    template <class F> void for_each_object(F &&f) const {
        for (nb::handle o : std::initializer_list<nb::handle>{scheduler, arrivals.records, arrivals.source,
                                                              arrivals.upstream, queue.requests})
            f(o);
    }
    void release();
    nb::object record(const Req &r) const { return arrivals.records[nb::int_(r.id)]; }
    int64_t active_tokens() const;
    double new_token_ratio() const { return config.oracle ? config.init_ratio : future.ratio; }
    int64_t used_tokens() const { return cache->evictable_size + cache->protected_size + reserved; }

    Config config;
    nb::object scheduler, config_object, cache_object, prefixes_object;
    radix::RadixCache *cache;
    radix::WaitingPrefixes *prefixes;
    WaitingQueue queue;
    Arrivals arrivals;
    FutureOutput future;
    double now = 0;
    int64_t reserved = 0;
    RoundTally tally{0, 0};  // the last play_round's or warm_up's, as far as it ran

private:
    Step iterate(nb::handle multipliers, nb::handle remaining);
    Ids let_in_arrivals();
    // Admission
    double room();
    void make_free(int64_t tokens);
    void allocate(int64_t tokens);
    bool admission_possible(int64_t taken, int64_t charged);
    nb::object schedule_prefill(std::vector<Admission> &batch, nb::handle multipliers, nb::handle remaining);
    nb::object admit_from_queue(std::vector<Admission> &batch, int64_t budget, int64_t charged,
                                nb::handle multipliers, nb::handle remaining);
    bool fit(const ReqPtr &r, int64_t budget, int64_t charged, bool later, Admission &adm, int64_t &output);
    nb::object order(nb::handle multipliers, nb::handle remaining, nb::object &decision);
    void check_permutation(nb::handle ordered, nb::handle waiting);
    bool in_batch_deprioritized(nb::handle waiting);
    void note_matches();
    bool waiting_as_read(nb::handle waiting) const;
    nb::list behind(nb::handle ordered, nb::handle waiting, bool as_read);
    void run_prefill(std::vector<Admission> &batch, Ids &admitted, Ids &resumed);
    void start_running(Admission &adm, const NodePtr &node);
    // Decode and retraction
    int64_t free_and_evictable() const { return config.kv_capacity_tokens - cache->protected_size - reserved; }
    Ids make_room();
    void forget(const std::vector<int64_t> &gone);
    void retract(const RunPtr &run, int64_t still_running);
    int64_t decode(bool retracted, Ids &finished);
    int64_t decode_limit();
    int64_t steps_until(double dt, int64_t batch, double a) const;
    std::vector<RunPtr> pop_finished();
    Ids retire(const std::vector<RunPtr> &done);
    nb::object output_tokens(const Req &r, const int64_t *&data) const;
    void cache_finished(const Run &run, const nb::object &output, const int64_t *out);
    void protect_prompt(NodePtr node, const Req &r, int64_t priority);
    void remove_running(const RunPtr &run);
    // The rules (rules.py): SGLang's, or the oracle's where `config.oracle`
    int64_t cap(const Req &r) const { return std::min(r.max_new_tokens, config.output_room(r.prompt_len)); }
    int64_t output_need(const Req &r, int64_t generated, int64_t cap) const {
        return config.oracle ? r.output_len - generated : std::min(cap - generated, config.clip);
    }
    int64_t smallest_need(const Req &r, int64_t generated, int64_t cap) const { return 1 + output_need(r, generated, cap); }
    bool fits(int64_t need, double room) const { return double(need + config.page_size) < room; }
    int64_t round_charge(int64_t tokens) const { return config.paged(tokens) - tokens + config.page_size; }
    int64_t chunk_end(int64_t length, int64_t cached, int64_t budget) const;
    int64_t round_output(const Req &r, int64_t generated, int64_t cap) const {
        return config.oracle ? r.output_len - generated : std::min(cap, config.clip);
    }
    int64_t chunked_output(const Req &r, int64_t generated, int64_t cap) const {
        return config.oracle ? 0 : round_output(r, generated, cap);
    }
    int64_t held(int64_t output) const { return config.oracle ? output : 0; }
    double rules_room(int64_t base, int64_t step) {
        return config.oracle ? double(base) : double(base) - future.offset_after(step, 0);
    }
    int64_t joined_rule(const Req &r, int64_t generated, int64_t cap, int64_t emitted, int64_t step);
    int64_t left(const Run &run, int64_t produced, int64_t step);
    int64_t decode_tokens(int64_t running) const { return config.oracle ? 0 : running; }
    int64_t rules_decode_limit(int64_t steps, int64_t running, int64_t free, std::optional<int64_t> blocked,
                               int64_t base, int64_t step);
    int64_t steps_until_fits(int64_t need, int64_t limit, int64_t running, int64_t base, int64_t step);

    std::vector<RunPtr> running;
    std::vector<std::pair<std::pair<int64_t, int64_t>, RunPtr>> finishing;  // min-heap on (done_at, id)
    int64_t steps = 0, context = 0, promised = 0;
    uint64_t rounds = 0;  // admission rounds so far: the current one's mark on its requests
    // A round's waiting list as the in-batch check read it (its objects and their requests) and the
    // queue's table edits then; `read_in` the round that read it. The order's requests as the
    // permutation check found them, for a list order.
    std::vector<PyObject *> read_items;
    std::vector<Req *> read_reqs, ordered_reqs;
    uint64_t read_in = 0, read_edits = 0;
    std::optional<Admission> chunked;
    std::optional<int64_t> blocked;
    HeadSet heads;
};

// The running batch's heap of completion steps orders by (done_at, request id), a unique key.
inline bool by_done(const std::pair<std::pair<int64_t, int64_t>, RunPtr> &a,
                    const std::pair<std::pair<int64_t, int64_t>, RunPtr> &b) {
    return a.first < b.first;
}

// `o`'s truth as Python's `if o:` takes it (1, numpy's bool, None), not only a bool's.
inline bool truthy(nb::handle o) {
    int t = PyObject_IsTrue(o.ptr());
    if (t < 0) throw nb::python_error();
    return t != 0;
}

// A record's count `field` (an interned name) grown by `n`.
inline void add_to(nb::handle record, nb::handle field, int64_t n) {
    record.attr(field) = nb::cast<int64_t>(record.attr(field)) + n;
}

// The names the engine reads and writes every round or iteration, interned once (py_calls.hpp).
struct Names {
    nb::str admit, sorts_in_place, in_batch_deprioritizes, remove, id, arrival, tokens, output_len,
        max_new_tokens, output_tokens, rejected, cached_tokens, computed_tokens, first_token, finish,
        retractions, prefill, decode, idle, bidder, urgency, value, bid;
};

// Python objects of the package the engine makes or calls, and the names, looked up once.
struct Python {
    nb::object iteration, waiting_round, unpack_admission, decision_priority, record_of, request, sequence,
        refuse_streamed;
    Names names;
};
const Python &python();

// `ids` as a Python list of ints.
nb::list list_of(const Ids &ids);

}  // namespace engine
