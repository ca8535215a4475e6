// The compiled engine's parts: its config's numbers, rules.FutureOutput, queue.WaitingQueue and
// arrivals.Arrivals (engine.hpp), each following its Python module's code.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "engine.hpp"
#include "request_slots.hpp"
#include "slot_fill.hpp"

namespace engine {

namespace {

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

const auto by_pair = [](const std::pair<int64_t, int64_t> &a, const std::pair<int64_t, int64_t> &b) { return a < b; };

// A 1-D int64 array's data, read in place where it is contiguous (read-only or not), else from a
// contiguous copy that replaces `array`, which the caller keeps alive.
const int64_t *data_of(nb::object &array) {
    if (const int64_t *data = pycall::int64_buffer(array)) return data;
    TokenArray view;
    if (!nb::try_cast(array, view, false)) {
        array = nb::module_::import_("numpy").attr("ascontiguousarray")(array);
        view = nb::cast<TokenArray>(array, false);
    }
    return view.data();
}

// An int as a 64-bit one, those beyond held at int64's ends: a request's output_len and cap, which
// only enter min and comparisons, where a larger one acts as int64's end does (the rejection,
// which reports the output_len, reads the request's own).
int64_t saturated(nb::handle o) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    return overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : int64_t(v);
}

// list.remove(r) where `r` and the items before it are Requests, which equal only themselves
// (eq=False): found by identity, without list.remove's comparisons; false, changing nothing, where
// another object comes first (list.remove, which compares it, decides).
bool remove_request(nb::list &requests, nb::handle r) {
    PyTypeObject *request = reinterpret_cast<PyTypeObject *>(python().request.ptr());
    if (Py_TYPE(r.ptr()) != request) return false;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(requests.ptr()); ++i) {
        PyObject *item = PyList_GET_ITEM(requests.ptr(), i);
        if (item == r.ptr()) {
            if (PyList_SetSlice(requests.ptr(), i, i + 1, nullptr) != 0) throw nb::python_error();
            return true;
        }
        if (Py_TYPE(item) != request) return false;
    }
    return false;
}

// `obj.<name>`, its field at `slot`: read in place where `obj` is a plain Request whose slot is
// set (what the interpreter reads), else by getattr (which raises for an unset one, or reads a
// field the class made something else).
nb::object field(nb::handle obj, Py_ssize_t request_slots::Fields::*slot, nb::handle name) {
    const request_slots::Fields &f = request_slots::fields();
    if (Py_TYPE(obj.ptr()) == f.type && f.*slot >= 0) {
        if (PyObject *value = request_slots::at_offset(obj.ptr(), f.*slot)) return nb::borrow(value);
    }
    return obj.attr(name);
}

// What `new_record` makes a record with, looked up once: RequestRecord's slots, numpy's array
// type and the defaults of the record's fields that `RequestRecord.of` leaves to them.
struct RecordMaker {
    static constexpr std::array<const char *, 8> kLater = {
        "admit", "first_token", "finish", "cached_tokens", "computed_tokens", "retractions", "preemptions",
        "rejected"};

    RecordMaker()
        : slots(record_class(), {"id", "bidder", "arrival", "prompt_len", "output_len", "urgency", "value", "bid",
                                 kLater[0], kLater[1], kLater[2], kLater[3], kLater[4], kLater[5], kLater[6],
                                 kLater[7]}),
          ndarray(reinterpret_cast<PyTypeObject *>(nb::module_::import_("numpy").attr("ndarray").ptr())) {
        nb::object fields = record_class().attr("__dataclass_fields__");
        for (std::size_t i = 0; i < kLater.size(); ++i) defaults[i] = fields[kLater[i]].attr("default");
    }

    static nb::object record_class() {
        return nb::module_::import_("auction_gym.engine.records").attr("RequestRecord");
    }

    pyslots::SlotMaker<16> slots;
    PyTypeObject *ndarray;  // held by the numpy module, which outlives this
    std::array<nb::object, 8> defaults;
};

// `RequestRecord.of(obj)`, where `obj` is a Request (of that class exactly: a subclass may read
// its fields otherwise) holding a numpy array of tokens (whose `size`, which `of` reads as
// `prompt_len`, is the length `r` read), made slot by slot (slot_fill.hpp) of the objects `of`
// reads, its later fields the dataclass's defaults (the same objects: a record's equality compares
// its NaNs by identity); else, or where the record's class was changed since, through `of`.
nb::object new_record(nb::handle obj, nb::handle rid, const Req &r) {
    static RecordMaker *maker = new RecordMaker();  // never freed, as python()'s objects
    if (Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject *>(python().request.ptr()) ||
        Py_TYPE(r.tokens.ptr()) != maker->ndarray) {
        return python().record_of(obj);
    }
    const Names &name = python().names;
    nb::object prompt_len = nb::steal(PyLong_FromLongLong(r.prompt_len));
    if (!prompt_len.is_valid()) throw nb::python_error();
    const std::array<nb::object, 8> &d = maker->defaults;
    using F = request_slots::Fields;
    nb::object record = maker->slots.make(
        {rid, field(obj, &F::bidder, name.bidder), field(obj, &F::arrival, name.arrival), prompt_len,
         field(obj, &F::output_len, name.output_len), field(obj, &F::urgency, name.urgency),
         field(obj, &F::value, name.value), field(obj, &F::bid, name.bid), d[0], d[1], d[2], d[3], d[4], d[5], d[6],
         d[7]});
    return record.is_valid() ? record : python().record_of(obj);
}

}  // namespace

const Python &python() {
    static const Python *py = [] {
        nb::module_ state = nb::module_::import_("auction_gym.engine.state");
        nb::module_ policy = nb::module_::import_("auction_gym.policy");
        nb::module_ base = nb::module_::import_("auction_gym.scheduler.base");
        nb::module_ records = nb::module_::import_("auction_gym.engine.records");
        nb::module_ request = nb::module_::import_("auction_gym.request");
        nb::module_ arrivals = nb::module_::import_("auction_gym.engine.arrivals");
        auto name = pycall::interned;
        Names names{name("admit"), name("sorts_in_place"), name("in_batch_deprioritizes"), name("remove"),
                    name("id"), name("arrival"), name("tokens"), name("output_len"), name("max_new_tokens"),
                    name("output_tokens"), name("rejected"), name("cached_tokens"), name("computed_tokens"),
                    name("first_token"), name("finish"), name("retractions"), name("prefill"), name("decode"),
                    name("idle"), name("bidder"), name("urgency"), name("value"), name("bid")};
        return new Python{state.attr("Iteration"), policy.attr("WaitingRound"), policy.attr("unpack_admission"),
                          base.attr("decision_priority"),
                          records.attr("RequestRecord").attr("of"), request.attr("Request"),
                          nb::module_::import_("collections.abc").attr("Sequence"), arrivals.attr("refuse_streamed"),
                          std::move(names)};
    }();  // never freed: it may outlive the interpreter's teardown of the modules it holds
    return *py;
}

nb::list list_of(const Ids &ids) {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(ids.size())));
    for (std::size_t i = 0; i < ids.size(); ++i) {
        PyObject *id = PyLong_FromLongLong(ids[i]);
        if (!id) throw nb::python_error();
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), id);
    }
    return out;
}

Config::Config(nb::handle c) {
    auto i64 = [&](const char *name) { return nb::cast<int64_t>(c.attr(name)); };
    auto f64 = [](nb::handle o, const char *name) { return nb::cast<double>(o.attr(name)); };
    kv_capacity_tokens = i64("kv_capacity_tokens");
    max_prefill_tokens = i64("max_prefill_tokens");
    max_running_requests = i64("max_running_requests");
    page_size = i64("page_size");
    clip = i64("clip_max_new_tokens");
    retract_decode_steps = i64("retract_decode_steps");
    in_batch_check = i64("in_batch_check_threshold");
    in_batch_threshold = i64("in_batch_deprioritize_threshold");
    decay_steps = i64("new_token_ratio_decay_steps");
    chunking = !c.attr("chunked_prefill_size").is_none();
    if (chunking) chunked_prefill_size = i64("chunked_prefill_size");
    in_batch = nb::cast<bool>(c.attr("in_batch_prefix_caching"));
    oracle = nb::cast<std::string>(c.attr("reservation")) == "oracle";
    reads_priorities = nb::cast<bool>(c.attr("reads_priorities"));
    init_ratio = f64(c, "init_new_token_ratio");
    min_ratio = f64(c, "min_new_token_ratio");
    nb::object cm = c.attr("cost_model");
    prefill_base = f64(cm, "prefill_base");
    prefill_per_token = f64(cm, "prefill_per_token");
    prefill_per_attention = f64(cm, "prefill_per_attention");
    decode_base = f64(cm, "decode_base");
    decode_per_request = f64(cm, "decode_per_request");
    decode_per_context_token = f64(cm, "decode_per_context_token");
    decode_knee = f64(cm, "decode_knee");
    decode_per_request_to_knee = f64(cm, "decode_per_request_to_knee");
}

double Config::decode_time(int64_t batch, int64_t context) const {
    // min(batch, knee) as Python takes it: batch unless the knee is smaller
    double knee = double(batch) <= decode_knee ? double(batch) : decode_knee;
    return decode_base + decode_per_request * double(batch) + decode_per_context_token * double(context) +
           decode_per_request_to_knee * knee;
}

FutureOutput::FutureOutput(const Config &config)
    : clip(config.clip), init(config.init_ratio), floor(config.min_ratio),
      decay((config.init_ratio - config.min_ratio) / double(config.decay_steps)), ratio(config.init_ratio) {}

void FutureOutput::add(int64_t rid, int64_t remaining, int64_t step) {
    int64_t key = remaining + step;
    bool is_clipped = remaining > clip;
    where[rid] = {key, is_clipped};
    if (is_clipped) {
        heappush(clipped, {key - clip, rid}, by_pair);
    } else {
        sum += key;
        ++count;
    }
}

void FutureOutput::remove(int64_t rid, int64_t step) {
    settle(step);
    auto found = where.find(rid);
    if (found == where.end()) throw std::logic_error("request " + std::to_string(rid) + " is not running");
    auto [key, is_clipped] = found->second;
    where.erase(found);
    if (is_clipped) {
        clipped.erase(std::remove_if(clipped.begin(), clipped.end(), [&](const auto &e) { return e.second == rid; }),
                      clipped.end());
        heapify(clipped, by_pair);
    } else {
        sum -= key;
        --count;
    }
}

double FutureOutput::offset_after(int64_t step, int64_t t) {
    if (!clipped.empty()) settle(step);
    double r = std::max(ratio - double(t) * decay, floor);
    return r * double(sum - count * (step + t) + clip * int64_t(clipped.size()));
}

void FutureOutput::settle(int64_t step) {
    while (!clipped.empty() && clipped[0].first <= step) {
        int64_t rid = heappop(clipped, by_pair).second;
        auto &entry = where.at(rid);
        entry.second = false;
        sum += entry.first;
        ++count;
    }
}

WaitingQueue::WaitingQueue() : left_since(nb::steal<nb::set>(PySet_New(nullptr))) {}

const ReqPtr &WaitingQueue::of(nb::handle r) const {
    const ReqPtr *found = by_object.find(r.ptr());
    if (!found) throw std::runtime_error("the scheduler's order holds a request that does not wait");
    return *found;
}

Req *WaitingQueue::find(nb::handle r) const {
    const ReqPtr *found = by_object.find(r.ptr());
    return found ? found->get() : nullptr;
}

const int64_t *WaitingQueue::tokens(const Req &r, int64_t &size, nb::object &array) const {
    if (!r.resumed_data) {
        array = r.tokens;
        size = r.prompt_len;
        return r.data;
    }
    array = r.resumed;
    size = r.resumed_size;
    return r.resumed_data;
}

// in_batch.prompt_head: the bytes of `r`'s first `n` tokens, read where the queue keeps them; none
// where it has fewer.
std::optional<std::string_view> WaitingQueue::head(const Req &r, int64_t n) const {
    const int64_t *data = r.resumed_data ? r.resumed_data : r.data;
    if ((r.resumed_data ? r.resumed_size : r.prompt_len) < n) return std::nullopt;
    return std::string_view(reinterpret_cast<const char *>(data), std::size_t(n) * 8);
}

void WaitingQueue::arrive(const std::vector<ReqPtr> &arrived, const std::vector<int64_t> &needs) {
    const auto earlier = [](const ReqPtr &a, const ReqPtr &b) {
        return a->arrival < b->arrival || (a->arrival == b->arrival && a->id < b->id);
    };
    // Usually in that order already (Arrivals::due pops them so): then neither copied nor sorted.
    std::vector<ReqPtr> sorted;
    if (!std::is_sorted(arrived.begin(), arrived.end(), earlier)) {
        sorted = arrived;
        std::stable_sort(sorted.begin(), sorted.end(), earlier);
    }
    const std::vector<ReqPtr> &in_order = sorted.empty() ? arrived : sorted;
    for (const ReqPtr &r : in_order) requests.append(r->obj);
    for (const ReqPtr &r : in_order) join(r);
    for (std::size_t i = 0; i < arrived.size(); ++i) set_need(arrived[i]->id, needs[i]);
}

void WaitingQueue::put_back(const ReqPtr &r, nb::object tokens, int64_t need) {
    r->resumed_data = data_of(tokens);
    r->resumed_size = int64_t(nb::len(tokens));
    r->resumed = std::move(tokens);
    requests.append(r->obj);
    join(r);
    set_need(r->id, need);
}

// The joined list is a copy, so the dict is cleared in place; the set goes on with the tuple.
nb::object WaitingQueue::take_changes() {
    nb::object joined = nb::steal(PyDict_Keys(joined_since.ptr()));
    if (!joined) throw nb::python_error();
    nb::object out = nb::make_tuple(joined, left_since);
    PyDict_Clear(joined_since.ptr());
    left_since = nb::steal<nb::set>(PySet_New(nullptr));
    return out;
}

void WaitingQueue::reorder(nb::handle order) { requests = nb::list(order); }

void WaitingQueue::remove(const std::vector<ReqPtr> &taken) {
    if (taken.size() == 1) {
        if (!remove_request(requests, taken[0]->obj)) call_method(requests, python().names.remove, taken[0]->obj);
    } else if (!taken.empty()) {
        std::vector<PyObject *> gone;  // by identity: waiting requests have distinct ids
        for (const ReqPtr &r : taken) gone.push_back(r->obj.ptr());
        std::sort(gone.begin(), gone.end());
        nb::list kept;
        for (nb::handle r : requests)
            if (!std::binary_search(gone.begin(), gone.end(), r.ptr())) kept.append(r);
        requests = kept;
    }
    for (const ReqPtr &r : taken) {
        if (joined_since.contains(r->obj))
            PyDict_DelItem(joined_since.ptr(), r->obj.ptr());
        else
            left_since.add(r->obj);
        r->resumed = nb::object();
        r->resumed_data = nullptr;
        need.erase(r->id);
        by_object.erase(r->obj.ptr());
    }
}

int64_t WaitingQueue::smallest_need() {
    while (true) {
        auto found = need.find(heap[0].second);
        if (found != need.end() && found->second == heap[0].first) return heap[0].first;
        heappop(heap, by_pair);
    }
}

void WaitingQueue::join(const ReqPtr &r) {
    r->head_epoch = 0;  // a retracted request waits with its output so far: another head
    r->joined = ++joins;
    by_object.insert(r->obj.ptr(), r);
    if (left_since.contains(r->obj))
        left_since.discard(r->obj);
    else
        joined_since[r->obj] = nb::none();
}

void WaitingQueue::set_need(int64_t rid, int64_t n) {
    need[rid] = n;
    if (heap.size() > 2 * need.size() + 64) {  // drop the stale entries now and then
        heap.clear();
        for (const auto &[i, v] : need) heap.push_back({v, i});
        heapify(heap, by_pair);
    } else {
        heappush(heap, {n, rid}, by_pair);
    }
}

void Arrivals::submit(nb::handle requests) {
    const Python &py = python();
    if (nb::isinstance(requests, py.request)) {
        ReqPtr r = record(requests);
        heappush(heap, Entry{r->arrival, r->id, r}, by_entry);
        return;
    }
    if (nb::isinstance(requests, py.sequence)) {
        for (nb::handle each : requests) {
            ReqPtr r = record(each);
            heappush(heap, Entry{r->arrival, r->id, r}, by_entry);
        }
        return;
    }
    if (!source.is_none()) throw std::runtime_error("a lazily read workload is already being replayed");
    source = nb::iter(requests);
    advance_source();
}

double Arrivals::next_time() const {
    double t = heap.empty() ? INFINITY : heap[0].arrival;
    if (lookahead) t = std::min(t, lookahead->arrival);
    return t;
}

double Arrivals::next_possible() const {
    double t = next_time();
    return upstream.is_none() ? t : std::min(t, nb::cast<double>(upstream()));
}

nb::list Arrivals::pending_requests() const {
    nb::list out;
    for (const Entry &e : heap) out.append(e.r->obj);
    if (lookahead) out.append(lookahead->obj);
    return out;
}

std::vector<ReqPtr> Arrivals::due(double now) {
    std::vector<ReqPtr> out;
    while (!heap.empty() && heap[0].arrival <= now) out.push_back(heappop(heap, by_entry).r);
    while (lookahead && lookahead->arrival <= now) {
        out.push_back(lookahead);
        advance_source();
    }
    return out;
}

ReqPtr Arrivals::read(nb::handle obj) {
    const Names &name = python().names;
    auto r = std::make_shared<Req>();
    r->obj = nb::borrow(obj);
    using F = request_slots::Fields;
    r->id = nb::cast<int64_t>(field(obj, &F::id, name.id));
    r->arrival = nb::cast<double>(field(obj, &F::arrival, name.arrival));
    r->tokens = field(obj, &F::tokens, name.tokens);
    r->data = data_of(r->tokens);
    r->prompt_len = int64_t(nb::len(r->tokens));
    r->output_len = saturated(field(obj, &F::output_len, name.output_len));
    r->max_new_tokens = saturated(field(obj, &F::max_new_tokens, name.max_new_tokens));
    r->output_tokens = field(obj, &F::output_tokens, name.output_tokens);
    if (!r->output_tokens.is_none()) r->output = data_of(r->output_tokens);
    return r;
}

ReqPtr Arrivals::record(nb::handle obj, ReqPtr read_already) {
    nb::object rid = field(obj, &request_slots::Fields::id, python().names.id);
    if (records.contains(rid)) throw nb::value_error(("request " + nb::cast<std::string>(nb::str(rid)) +
                                                      ": duplicate request id").c_str());
    ReqPtr r = read_already ? std::move(read_already) : read(obj);
    records[rid] = new_record(obj, rid, *r);
    return r;
}

void Arrivals::advance_source() {
    ReqPtr prev = lookahead;
    nb::handle it = source;
    PyObject *next = PyIter_Next(it.ptr());
    if (!next && PyErr_Occurred()) throw nb::python_error();
    nb::object obj = nb::steal(next);
    if (!next || !PyObject_TypeCheck(next, (PyTypeObject *)python().request.ptr())) {
        lookahead = nullptr;  // the stream ends, exhausted or refused
        source = nb::none();
        if (next) python().refuse_streamed(obj);  // raises Python's TypeError
        return;
    }
    lookahead = read(obj);
    if (prev && lookahead->arrival < prev->arrival) {
        nb::str msg = nb::str("request {}: lazily read workloads must be sorted by arrival ({} after {})")
                          .format(lookahead->id, lookahead->arrival, prev->arrival);
        throw nb::value_error(msg.c_str());
    }
    lookahead = record(obj, lookahead);
}

}  // namespace engine
