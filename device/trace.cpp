// Chrome trace / Perfetto JSON: process 1 has a lane per engine (one per AI core), process 2 a
// lane per stream; flow arrows join a task to the tasks on other lanes it waited for; a
// counter tracks device memory. Timestamps are simulated microseconds; wall times are in args.
#include <fstream>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "device/core.hpp"

namespace loom::device {

namespace {

constexpr int kPidEngines = 1;
constexpr int kPidStreams = 2;

struct LaneMap {
    int first[kEngineCount] = {};
    int count[kEngineCount] = {};
    explicit LaneMap(const DeviceSpec& spec) {
        int next = 1;
        for (size_t e = 0; e < kEngineCount; ++e) {
            first[e] = next;
            count[e] = static_cast<Engine>(e) == Engine::AICORE ? static_cast<int>(spec.aicore_count) : 1;
            next += count[e];
        }
    }
    int tid(Engine e, uint16_t lane) const { return first[static_cast<size_t>(e)] + lane; }
};

nlohmann::json meta(const char* what, int pid, int tid, const std::string& name) {
    nlohmann::json j{{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", {{"name", name}}}};
    if (tid >= 0) j["tid"] = tid;
    return j;
}

}  // namespace

std::string Device::trace_json() const {
    const detail::Core& c = *core_;
    std::lock_guard lock(c.submit_mutex);
    LaneMap lanes(c.spec);
    nlohmann::json events = nlohmann::json::array();
    events.push_back(meta("process_name", kPidEngines, -1, fmt::format("NPU {} engines", c.spec.name)));
    events.push_back(meta("process_name", kPidStreams, -1, "streams"));
    for (size_t e = 0; e < kEngineCount; ++e) {
        for (int l = 0; l < lanes.count[e]; ++l) {
            std::string name = static_cast<Engine>(e) == Engine::AICORE
                                   ? fmt::format("aicore{}", l)
                                   : std::string(engine_name(static_cast<Engine>(e)));
            int tid = lanes.first[e] + l;
            events.push_back(meta("thread_name", kPidEngines, tid, name));
            events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", kPidEngines}, {"tid", tid},
                              {"args", {{"sort_index", tid}}}});
        }
    }
    // Live streams and dropped ones that left records.
    std::set<uint32_t> stream_ids;
    for (const auto& w : c.streams)
        if (auto s = w.lock()) stream_ids.insert(s->id);
    for (const auto& r : c.records) stream_ids.insert(r.stream);
    for (uint32_t id : stream_ids)
        events.push_back(meta("thread_name", kPidStreams, static_cast<int>(id) + 1, fmt::format("stream {}", id)));

    std::unordered_map<uint64_t, const detail::TaskRecord*> by_id;
    by_id.reserve(c.records.size());
    for (const auto& r : c.records) by_id[r.id] = &r;

    uint64_t flow_id = 0;
    for (const auto& r : c.records) {
        double ts = sim_to_us(r.start), dur = sim_to_us(r.end - r.start);
        nlohmann::json args{{"task", r.id},
                            {"stream", r.stream},
                            {"engine", engine_name(r.engine)},
                            {"sim_start_us", ts},
                            {"sim_dur_us", dur},
                            {"wall_start_us", r.wall_start_us},
                            {"wall_dur_us", r.wall_end_us - r.wall_start_us}};
        if (r.bytes) args["bytes"] = r.bytes;
        if (r.failed) args["failed"] = true;
        if (r.sink) args["dispatch"] = "sink";
        if (r.cycles) {
            const CycleBreakdown& cb = *r.cycles;
            args["cycles"] = {{"total", cb.total},   {"mte_in", cb.mte_in}, {"mte_out", cb.mte_out},
                              {"cube", cb.cube},     {"vector", cb.vector}, {"scalar", cb.scalar},
                              {"cores", cb.cores_used}, {"blocks", cb.blocks}, {"rounds", cb.rounds},
                              {"l2_hit_bytes", cb.l2_hit_bytes}, {"l2_miss_bytes", cb.l2_miss_bytes}};
        }
        std::string cat(engine_name(r.engine));
        for (uint16_t l : r.lanes)
            events.push_back({{"ph", "X"}, {"name", r.name}, {"cat", cat}, {"ts", ts}, {"dur", dur},
                              {"pid", kPidEngines}, {"tid", lanes.tid(r.engine, l)}, {"args", args}});
        events.push_back({{"ph", "X"}, {"name", r.name}, {"cat", cat}, {"ts", ts}, {"dur", dur},
                          {"pid", kPidStreams}, {"tid", static_cast<int>(r.stream) + 1}, {"args", args}});
        // Arrows from each task this one waited for, when it ran on another lane or came from
        // another stream (an event wait). The start binds
        // to the predecessor's slice (its start lies inside it); the end to this task's slice.
        int my_tid = lanes.tid(r.engine, r.lanes.front());
        for (uint64_t dep : r.deps) {
            auto it = by_id.find(dep);
            if (it == by_id.end()) continue;
            const detail::TaskRecord& p = *it->second;
            int p_tid = lanes.tid(p.engine, p.lanes.front());
            if (p_tid == my_tid && p.stream == r.stream) continue;  // plain stream order on one lane
            ++flow_id;
            events.push_back({{"ph", "s"}, {"name", "dep"}, {"cat", "flow"}, {"id", flow_id},
                              {"ts", sim_to_us(p.start)}, {"pid", kPidEngines}, {"tid", p_tid}});
            events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "dep"}, {"cat", "flow"}, {"id", flow_id},
                              {"ts", ts}, {"pid", kPidEngines}, {"tid", my_tid}});
        }
    }
    for (const auto& [t, used] : c.memory_counter)
        events.push_back({{"ph", "C"}, {"name", "device memory"}, {"ts", sim_to_us(t)}, {"pid", kPidEngines},
                          {"args", {{"used_bytes", used}}}});

    nlohmann::json doc{{"traceEvents", std::move(events)},
                       {"displayTimeUnit", "ns"},
                       {"otherData",
                        {{"device", c.spec.name},
                         {"spec_hash", fmt::format("{:016x}", c.spec.hash())},
                         {"clock", "ts/dur are simulated device microseconds; wall times are in args"},
                         {"sim_makespan_us", sim_to_us(c.sim_now)},
                         {"tasks_dropped", c.trace_dropped},
                         {"memory_samples_dropped", c.trace_memory_dropped}}}};
    return doc.dump();
}

Status Device::write_trace(const std::string& path) const {
    if (!core_->options.trace)
        return make_error(StatusCode::FAILED_PRECONDITION, "{}: tracing was not enabled when the device was created",
                          path);
    std::string text = trace_json();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(StatusCode::IO_ERROR, "{}: cannot open for writing", path);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) return make_error(StatusCode::IO_ERROR, "{}: write failed", path);
    return {};
}

}  // namespace loom::device
