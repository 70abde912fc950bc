#include "daemon/jobs.hpp"

#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "common/file.hpp"
#include "common/log.hpp"
#include "daemon/job_paths.hpp"
#include "pipeline/pipeline.hpp"
#include "preprocess/media_io.hpp"

namespace loom::daemon {

namespace fs = std::filesystem;

struct JobManager::Job {
    JobRecord rec;             // guarded by the manager's mutex
    DaemonConfig config;       // the settings it was admitted under (or resumed with)
    // Set to stop the running pipeline: by cancel() (cancel_requested) or drain().
    std::atomic<bool> stop{false};
    bool cancel_requested = false;  // guarded by the manager's mutex
    bool running = false;           // a worker holds it; guarded
    // Progress of the running job; written by its worker, read by anyone.
    std::atomic<int64_t> frames_done{0};
    std::atomic<double> fps{0};
    std::vector<pipeline::StageProgress> stages;  // guarded: the running segment's stages
    uint64_t ended_before = 0;      // guarded: jobs that had ended when this attempt began
    // The watchdog's view: true while a segment's frames flow (not while planning, preparing a
    // pipeline or joining), and when they last moved (steady seconds).
    std::atomic<bool> in_run{false};
    std::atomic<double> frames_moved_s{0};
    // The segments' pts bounds (the worker's only): from the plan, or found again with one scan
    // of the input when a restart resumes the job. Empty: each segment's pipeline scans.
    std::vector<preprocess::SegmentRange> ranges;
};

namespace {

double steady_now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_regular(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The entries of `folder` (none when it cannot be read); never throws, unlike a range-for over a
// directory_iterator, whose increment throws on a read error.
std::vector<fs::path> entries_of(const fs::path& folder) {
    std::vector<fs::path> out;
    std::error_code ec;
    fs::directory_iterator it(folder, ec), end;
    while (!ec && it != end) {
        out.push_back(it->path());
        it.increment(ec);
    }
    return out;
}

// The temporary files a writer of `path` leaves when its process is killed
// (".STEM.partial-PID-N-RANDOM.EXT"): removed when that process is gone.
void remove_stale_partials(const std::string& path) {
    const fs::path p(path);
    const std::string prefix = "." + p.stem().string() + ".partial-";
    std::error_code ec;
    for (const fs::path& e : entries_of(p.parent_path())) {
        const std::string name = e.filename().string();
        if (name.rfind(prefix, 0) != 0 || !name.ends_with(p.extension().string())) continue;
        const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
        if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
            fs::remove(e, ec);
            log::info("daemon", "removed {}, left by a killed writer", e.string());
        }
    }
}

std::string error_text(const Status& st) { return std::string(status_code_name(st.code())) + ": " + st.message(); }

// Pipeline names are file names in the pipelines folder: no path, no hidden files.
bool valid_pipeline_name(const std::string& n) {
    if (n.empty() || n.size() > 128 || n[0] == '.') return false;
    for (char c : n)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
    return true;
}

}  // namespace

void JobManager::crash_point(std::string_view point, int64_t segment) const {
    if (crash_.empty()) return;
    const std::string here = segment >= 0 ? fmt::format("{}:{}", point, segment) : std::string(point);
    if (here != crash_) return;
    log::warn("daemon", "LOOM_JOB_CRASH={}: killing loomd here", crash_);
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
}

Result<std::unique_ptr<JobManager>> JobManager::start(const DaemonConfig& config,
                                                      std::shared_ptr<restore::DeviceContext> context,
                                                      std::unique_ptr<Journal> journal, EventSink sink) {
    std::unique_ptr<JobManager> m(new JobManager());
    if (const char* c = std::getenv("LOOM_JOB_CRASH"); c && *c) m->crash_ = c;
    m->config_ = config;
    m->context_ = std::move(context);
    m->journal_ = std::move(journal);
    m->sink_ = std::move(sink);
    std::error_code ec;
    fs::create_directories(config.jobs_dir(), ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: cannot create the jobs folder: {}", config.jobs_dir(), ec.message());
    LOOM_ASSIGN_OR_RETURN(std::vector<JobRecord> records, m->journal_->load());
    size_t resumed = 0, finished = 0;
    for (JobRecord& r : records) {
        auto job = std::make_shared<Job>();
        if (!job_finished(r.state)) {
            r.state = JobState::QUEUED;  // a job that was running resumes from the queue
            ++resumed;
        } else {
            ++finished;
        }
        job->rec = std::move(r);
        job->config = config;
        m->jobs_[job->rec.id] = std::move(job);
    }
    {
        std::lock_guard lock(m->mutex_);
        m->evict_locked();
    }
    // Part folders of jobs the journal does not hold (pruned, or a crash before the commit of
    // their job) are left-overs: removed.
    for (const fs::path& entry : entries_of(config.jobs_dir())) {
        int64_t id = 0;
        const std::string name = entry.filename().string();
        const bool numeric = !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit) && name.size() < 18;
        if (numeric) id = std::stoll(name);
        auto it = m->jobs_.find(id);
        if (!numeric || it == m->jobs_.end() || job_finished(it->second->rec.state)) fs::remove_all(entry, ec);
    }
    log::info("daemon", "journal {}: {} jobs to resume, {} finished kept", m->journal_->path(), resumed, finished);
    for (int64_t i = 0; i < config.jobs_running; ++i) m->workers_.emplace_back([p = m.get()] { p->worker(); });
    return m;
}

JobManager::~JobManager() { drain(); }

void JobManager::drain() {
    {
        std::lock_guard lock(mutex_);
        draining_ = true;
        for (auto& [id, job] : jobs_)
            if (job->running) job->stop = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_)
        if (t.joinable()) t.join();
    workers_.clear();
}

void JobManager::reconfigure(const DaemonConfig& config) {
    {
        std::lock_guard lock(mutex_);
        config_ = config;
        // More workers when more jobs may run at once; fewer: the extra ones idle (worker()).
        while (!draining_ && static_cast<int64_t>(workers_.size()) < config.jobs_running)
            workers_.emplace_back([this] { worker(); });
    }
    wake_.notify_all();
}

nlohmann::json JobManager::describe_locked(const Job& j) const {
    const JobRecord& r = j.rec;
    int64_t segments_done = 0, frames_recorded = 0;
    for (const SegmentRecord& s : r.segments) {
        segments_done += s.done;
        if (s.done) frames_recorded += s.frames;
    }
    const int64_t frames = r.state == JobState::RUNNING ? j.frames_done.load() : frames_recorded;
    const double fps = r.state == JobState::RUNNING ? j.fps.load() : 0.0;
    double eta = -1;
    if (r.state == JobState::RUNNING && fps > 0 && r.frames_total > 0)
        eta = static_cast<double>(std::max<int64_t>(0, r.frames_total - frames)) / fps;
    nlohmann::json out = {{"id", r.id},
                          {"client_id", r.client_id},
                          {"pipeline", r.pipeline},
                          {"input", r.input},
                          {"output", r.output},
                          {"priority", r.priority},
                          {"state", job_state_name(r.state)},
                          {"error", r.error},
                          {"submitted_at", r.submitted_at},
                          {"started_at", r.started_at},
                          {"finished_at", r.finished_at},
                          {"attempts", r.attempts},
                          {"frames_total", r.frames_total},
                          {"frames_done", r.state == JobState::DONE ? r.frames_total : frames},
                          {"segments_total", r.segments.size()},
                          {"segments_done", segments_done},
                          {"fps", fps},
                          {"eta_s", eta}};
    if (r.state == JobState::RUNNING) {
        nlohmann::json stages = nlohmann::json::array();
        for (const pipeline::StageProgress& s : j.stages)
            stages.push_back({{"name", s.name},
                              {"frames", s.frames_out},
                              {"queue", s.queue_depth},
                              {"queue_capacity", s.queue_capacity},
                              {"drops", s.drops},
                              {"busy", 1.0 - s.wait_share}});
        out["stages"] = std::move(stages);
    }
    return out;
}

void JobManager::publish(Job& job, std::string_view event) {
    if (!sink_) return;
    nlohmann::json body;
    {
        std::lock_guard lock(mutex_);
        body = describe_locked(job);
    }
    sink_(job.rec.id, event, body);
}

void JobManager::evict_locked() {
    size_t finished = 0;
    for (const auto& [id, j] : jobs_) finished += job_finished(j->rec.state);
    for (auto it = jobs_.begin(); finished > kFinishedKept && it != jobs_.end();) {
        if (job_finished(it->second->rec.state)) {
            it = jobs_.erase(it);
            --finished;
        } else {
            ++it;
        }
    }
}

Result<nlohmann::json> JobManager::submit(const SubmitRequest& q) {
    DaemonConfig config;
    {
        std::lock_guard lock(mutex_);
        config = config_;
        if (draining_) return make_error(StatusCode::FAILED_PRECONDITION, "submit: loomd is stopping; submit again");
    }
    auto refuse = [&](Status st) -> Status {
        std::lock_guard lock(mutex_);
        ++counts_.refused;
        return st;
    };
    JobRecord rec;
    rec.client_id = q.client_id;
    rec.priority = q.priority;
    rec.overwrite = q.overwrite;
    rec.sets = q.sets;
    // A retried submit (same client id) gets its job back before anything else is checked.
    if (!q.client_id.empty()) {
        std::lock_guard lock(mutex_);
        for (const auto& [id, j] : jobs_)
            if (j->rec.client_id == q.client_id) return describe_locked(*j);
    }
    // The pipeline: a name from the folder, or the text the client sent.
    if (q.pipeline_text.empty()) {
        if (!valid_pipeline_name(q.pipeline))
            return refuse(make_error(StatusCode::INVALID_ARGUMENT,
                                     "submit: 'pipeline' '{}' is not a pipeline name (letters, digits, '-', '_', "
                                     "'.'; or send the file's text)",
                                     q.pipeline));
        const std::string name = q.pipeline.ends_with(".toml") ? q.pipeline : q.pipeline + ".toml";
        const std::string file = config.pipelines_dir + "/" + name;
        if (!is_regular(file)) {
            std::vector<std::string> known;
            std::error_code ec;
            for (const fs::path& e : entries_of(config.pipelines_dir))
                if (e.extension() == ".toml") known.push_back(e.stem().string());
            std::sort(known.begin(), known.end());
            return refuse(make_error(StatusCode::NOT_FOUND, "submit: 'pipeline': no pipeline '{}' in {} (known: {})",
                                     q.pipeline, config.pipelines_dir, fmt::join(known, ", ")));
        }
        Result<std::string> text = read_file(file, uint64_t{1} << 20);
        if (!text.ok()) return refuse(text.status().with_context("submit: 'pipeline'"));
        rec.pipeline = q.pipeline;
        rec.pipeline_text = std::move(*text);
        rec.base_dir = config.pipelines_dir;
    } else {
        rec.pipeline = q.pipeline.empty() ? std::string("(sent)") : q.pipeline;
        rec.pipeline_text = q.pipeline_text;
        if (q.base_dir.empty() || fs::path(q.base_dir).is_relative())
            return refuse(make_error(StatusCode::INVALID_ARGUMENT,
                                     "submit: 'base_dir' must be the absolute folder of the pipeline sent"));
        rec.base_dir = q.base_dir;
    }
    Result<std::string> checked = pipeline::check_config(
        pipeline::PipelineSource::from_text(rec.pipeline, rec.pipeline_text, rec.base_dir), rec.sets);
    if (!checked.ok()) return refuse(checked.status().with_context("submit: 'pipeline'"));
    // Paths, inside the allowed folders.
    PathPolicy policy{config.allow};
    Result<std::string> input = check_job_input(policy, "input", q.input);
    if (!input.ok()) return refuse(input.status().with_context("submit"));
    Result<std::string> output = check_job_output(policy, "output", q.output, q.overwrite);
    if (!output.ok()) return refuse(output.status().with_context("submit"));
    rec.input = *input;  // as checked: links resolved, so a link swapped in later is not followed
    rec.output = *output;
    if (fs::path(rec.output).extension().empty())
        return refuse(make_error(StatusCode::INVALID_ARGUMENT,
                                 "submit: 'output' {}: no extension (it names the container: .mkv, .mp4, ...)",
                                 rec.output));
    // The input: a video file the daemon can read again (segments, a resume), with frames no
    // larger than allowed. A pipe is a live source: frame streams, not jobs, take those.
    if (!is_regular(*input))
        return refuse(make_error(StatusCode::INVALID_ARGUMENT,
                                 "submit: 'input' {}: not a regular file (a job reads its input again for each "
                                 "segment and after a restart)",
                                 q.input));
    {
        // The input probed and the models imported (nothing compiled): a frame size above the
        // limit, or a job whose least device memory is above the device's capacity, can never
        // run and is refused now, not after it waited in the queue.
        pipeline::RunOptions o;
        o.input = *input;
        o.sets = rec.sets;
        o.models_dir = config.models_dir;
        o.cache_dir = config.cache_dir;
        Result<pipeline::PipelineNeeds> needs = pipeline::estimate_needs(
            pipeline::PipelineSource::from_text(rec.pipeline, rec.pipeline_text, rec.base_dir), o);
        if (!needs.ok()) return refuse(needs.status().with_context("submit"));
        const FrameLayout& l = needs->source;
        const int64_t pixels = int64_t{l.width} * l.height;
        if (pixels > config.pixels_per_frame_max)
            return refuse(make_error(StatusCode::INVALID_ARGUMENT,
                                     "submit: 'input' {}: {}x{} frames ({} pixels) exceed [limits] "
                                     "pixels_per_frame_max {}",
                                     q.input, l.width, l.height, pixels, config.pixels_per_frame_max));
        const device::DeviceSpec& spec = context_->device().spec();
        const auto capacity = static_cast<uint64_t>(spec.memory_bytes());
        if (needs->device_bytes_min > capacity)
            return refuse(make_error(StatusCode::OUT_OF_DEVICE_MEMORY,
                                     "submit: the job needs at least {} bytes of device memory ({}), and the device "
                                     "'{}' has {} bytes: it can never run here",
                                     needs->device_bytes_min, fmt::join(needs->detail, "; "), spec.name, capacity));
    }
    // Room in the queue; then the commit, which is the acknowledgement.
    {
        std::lock_guard lock(mutex_);
        // An unfinished job's output is taken, and so is its input (a job may not write it).
        for (const auto& [id, j] : jobs_) {
            if (job_finished(j->rec.state)) continue;
            if (j->rec.output == rec.output || j->rec.input == rec.output || j->rec.output == rec.input) {
                ++counts_.refused;
                return make_error(StatusCode::FAILED_PRECONDITION,
                                  "submit: 'output' {}: job {} (unfinished) already uses it{}", rec.output, id,
                                  j->rec.output == rec.input ? " (as its output; this job's input)" : "");
            }
        }
        int64_t queued = 0;
        for (const auto& [id, j] : jobs_) queued += j->rec.state == JobState::QUEUED;
        if (queued >= config.jobs_queued) {
            ++counts_.refused;
            return make_error(StatusCode::RESOURCE_EXHAUSTED,
                              "submit: the queue is full ({} jobs waiting, [limits] jobs_queued = {}); submit again "
                              "when one has started",
                              queued, config.jobs_queued);
        }
    }
    bool existed = false;
    Status st = journal_->insert(rec, &existed);
    if (!st.ok()) return refuse(st.with_context("submit"));
    crash_point("submitted", -1);
    std::shared_ptr<Job> job;
    {
        std::lock_guard lock(mutex_);
        if (auto it = jobs_.find(rec.id); it != jobs_.end()) return describe_locked(*it->second);
        if (existed)  // a job pruned from memory: the journal has it
            return nlohmann::json{{"id", rec.id}, {"client_id", rec.client_id}, {"state", "unknown"}};
        job = std::make_shared<Job>();
        job->rec = std::move(rec);
        job->config = config;
        jobs_[job->rec.id] = job;
        ++counts_.submitted;
    }
    log::info("daemon", "job {} queued: {} {} -> {} (priority {})", job->rec.id, job->rec.pipeline, job->rec.input,
              job->rec.output, job->rec.priority);
    wake_.notify_one();
    publish(*job, "state");
    std::lock_guard lock(mutex_);
    return describe_locked(*job);
}

Result<nlohmann::json> JobManager::status(int64_t id) const {
    std::lock_guard lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end())
        return make_error(StatusCode::NOT_FOUND, "job {}: no such job (finished jobs are kept for the last {})", id,
                          kFinishedKept);
    return describe_locked(*it->second);
}

nlohmann::json JobManager::list() const {
    std::lock_guard lock(mutex_);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [id, j] : jobs_) out.push_back(describe_locked(*j));
    return out;
}

Result<nlohmann::json> JobManager::cancel(int64_t id) {
    std::shared_ptr<Job> job;
    bool was_queued = false;
    {
        std::lock_guard lock(mutex_);
        auto it = jobs_.find(id);
        if (it == jobs_.end()) return make_error(StatusCode::NOT_FOUND, "job {}: no such job", id);
        job = it->second;
        if (job_finished(job->rec.state))
            return make_error(StatusCode::FAILED_PRECONDITION, "job {}: already {}", id, job_state_name(job->rec.state));
        job->cancel_requested = true;
        job->stop = true;
        was_queued = !job->running;
    }
    if (was_queued) {
        // Nobody runs it: it is finished here (a worker that picks it up sees cancel_requested).
        finish(*job, JobState::CANCELLED, make_error(StatusCode::CANCELLED, "cancelled while queued"));
    }
    std::lock_guard lock(mutex_);
    return describe_locked(*job);
}

bool JobManager::stalled(double window_s) const {
    const double now = steady_now_s();
    std::lock_guard lock(mutex_);
    for (const auto& [id, j] : jobs_)
        if (j->running && j->in_run.load() && now - j->frames_moved_s.load() > window_s) return true;
    return false;
}

JobCounts JobManager::counts() const {
    std::lock_guard lock(mutex_);
    JobCounts c = counts_;
    for (const auto& [id, j] : jobs_) {
        c.queued += j->rec.state == JobState::QUEUED;
        c.running += j->rec.state == JobState::RUNNING;
    }
    return c;
}

void JobManager::worker() {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock lock(mutex_);
            for (;;) {
                if (draining_) return;
                if (running_ < config_.jobs_running && !memory_wait_) {
                    // Priority first, then arrival (ids grow with arrival).
                    for (auto& [id, j] : jobs_) {
                        if (j->running || j->rec.state != JobState::QUEUED || j->cancel_requested) continue;
                        if (!job || j->rec.priority > job->rec.priority) job = j;
                    }
                }
                if (job) break;
                wake_.wait(lock);
            }
            job->running = true;
            job->stop = false;
            job->ended_before = jobs_ended_;
            job->rec.state = JobState::RUNNING;
            ++running_;
        }
        run(*job);
        bool orphaned = false;
        {
            std::lock_guard lock(mutex_);
            job->running = false;
            --running_;
            ++jobs_ended_;
            // Another job ended: what did not fit may fit now (the waiting job's own end, as it
            // queues itself again, frees nothing).
            if (job->rec.id != memory_waiter_) memory_wait_ = false;
            // A cancel that came after run() had decided to queue the job again (it waits for
            // memory) found it running and left the ending to this thread.
            orphaned = job->cancel_requested && !job_finished(job->rec.state);
        }
        if (orphaned) finish(*job, JobState::CANCELLED, make_error(StatusCode::CANCELLED, "cancelled"));
        // A job's threads (its stages', its encoder's) leave free memory in the allocator's
        // per-thread arenas; given back to the system once the job is over, the daemon's RSS
        // stays flat over weeks of jobs instead of creeping with every new thread's arena.
        ::malloc_trim(0);
        {
            std::lock_guard lock(mutex_);
            evict_locked();
        }
        wake_.notify_all();
    }
}

void JobManager::finish(Job& job, JobState state, const Status& error) {
    const int64_t id = job.rec.id;
    Status st = journal_->set_state(id, state, state == JobState::FAILED ? error_text(error) : std::string());
    std::error_code ec;
    if (st.ok()) {
        fs::remove_all(fmt::format("{}/{}", job.config.jobs_dir(), id), ec);
        // A join that a killed daemon cut off left its temporary output: gone with the job.
        if (state != JobState::DONE) remove_stale_partials(job.rec.output);
    }
    else  // the journal still says unfinished: its parts stay for the restart that resumes it
        log::error("daemon", "job {}: {}; its parts are kept", id, st.message());
    {
        std::lock_guard lock(mutex_);
        job.rec.state = state;
        job.rec.error = state == JobState::FAILED ? error_text(error) : std::string();
        job.rec.finished_at = unix_time_s();
        if (state == JobState::DONE) ++counts_.done;
        if (state == JobState::FAILED) ++counts_.failed;
        if (state == JobState::CANCELLED) ++counts_.cancelled;
    }
    if (state == JobState::FAILED)
        log::warn("daemon", "job {} failed: {}", id, error_text(error));
    else
        log::info("daemon", "job {} {}", id, job_state_name(state));
    publish(job, "state");
}

void JobManager::run(Job& job) {
    const int64_t id = job.rec.id;
    {
        // Cancelled between the worker's pick and here: cancel() saw it running and left the
        // ending to this thread.
        std::unique_lock lock(mutex_);
        if (job.cancel_requested) {
            lock.unlock();
            finish(job, JobState::CANCELLED, make_error(StatusCode::CANCELLED, "cancelled before it started"));
            return;
        }
    }
    Status st = journal_->mark_started(id);
    if (st.ok()) {
        std::lock_guard lock(mutex_);
        ++job.rec.attempts;
        if (job.rec.started_at == 0)
            job.rec.started_at = unix_time_s();
    }
    publish(job, "state");
    if (st.ok()) st = run_segments(job);
    bool cancelled = false, draining = false;
    {
        std::lock_guard lock(mutex_);
        cancelled = job.cancel_requested;
        draining = draining_;
    }
    if (st.ok()) {
        finish(job, JobState::DONE, {});
    } else if (cancelled) {
        finish(job, JobState::CANCELLED, st);
    } else if (draining && st.code() == StatusCode::CANCELLED) {
        // Stopped to resume: the journal keeps it running; the next start queues it again.
        std::lock_guard lock(mutex_);
        job.rec.state = JobState::QUEUED;
        log::info("daemon", "job {} stopped at a resumable point", id);
    } else if (st.code() == StatusCode::OUT_OF_DEVICE_MEMORY) {
        std::unique_lock lock(mutex_);
        const bool others_running = running_ > 1;
        const bool freed_meanwhile = jobs_ended_ != job.ended_before;
        if (others_running || freed_meanwhile) {
            // Another job holds (or held, while this one prepared) the memory this one needs: it
            // waits for one to end, or tries again at once when one already has.
            job.rec.state = JobState::QUEUED;
            if (others_running) {
                memory_wait_ = true;
                memory_waiter_ = id;
            }
            log::info("daemon", "job {} waits for device memory: {}", id, st.message());
            lock.unlock();
            publish(job, "state");
        } else {
            lock.unlock();
            finish(job, JobState::FAILED,
                   st.with_context("the job does not fit in the device's memory even alone"));
        }
    } else {
        finish(job, JobState::FAILED, st);
    }
}

constexpr int kSegmentsMax = 256;

namespace {

// A job's pipeline read again (its input probed, its model imported): what plan() and
// check_join() go by.
Result<pipeline::PipelineNeeds> needs_of(const JobRecord& r, const DaemonConfig& config) {
    pipeline::RunOptions o;
    o.input = r.input;
    o.sets = r.sets;
    o.models_dir = config.models_dir;
    o.cache_dir = config.cache_dir;
    return pipeline::estimate_needs(pipeline::PipelineSource::from_text(r.pipeline, r.pipeline_text, r.base_dir), o);
}

}  // namespace

Status JobManager::check_join(const Job& job, const std::vector<std::string>& parts, int64_t frames) {
    const int64_t id = job.rec.id;
    const std::string where = fmt::format("job {}: checking the joined output", id);
    auto needs = needs_of(job.rec, job.config);
    if (!needs.ok()) return needs.status().with_context(where);
    if (needs->fidelity.empty() || needs->fidelity == "off") return {};
    preprocess::ReaderOptions ro;
    ro.hwaccel = "none";
    preprocess::OutputExpectation e;
    {
        LOOM_ASSIGN_OR_RETURN(auto source, preprocess::MediaReader::open(job.rec.input, ro));
        e.source = source->info();
        LOOM_ASSIGN_OR_RETURN(auto part, preprocess::MediaReader::open(parts.front(), ro));
        e.layout = part->info().layout;  // the first part was checked against its own frames
        e.color = part->info().color;
    }
    const FrameLayout& s = e.source.layout;
    if (s.width > 0 && e.layout.width % s.width == 0 && e.layout.width / s.width * s.height == e.layout.height)
        e.scale = e.layout.width / s.width;
    e.frames = frames;
    e.copy_streams = needs->copy_streams;
    auto checked = preprocess::check_output(job.rec.output, e);
    if (!checked.ok()) return checked.status().with_context(where);
    const preprocess::FidelityReport& report = *checked;
    if (report.unexplained() == 0) {
        log::info("daemon", "job {}: the joined output checked against its source: {} comparisons, no difference "
                            "unaccounted for", id, report.checks);
        return {};
    }
    const std::string what = fmt::format("job {}: the joined output {} differs from its source in {} of {} "
                                         "comparisons: {}",
                                         id, job.rec.output, report.unexplained(), report.checks, report.summary());
    if (needs->fidelity == "warn") {
        log::warn("daemon", "{}", what);
        return {};
    }
    std::error_code ec;
    fs::remove(job.rec.output, ec);
    return make_error(StatusCode::FAILED_PRECONDITION, "{} (the output was removed; encode.fidelity = \"warn\" keeps "
                                                       "it)", what);
}

Status JobManager::plan(Job& job) {
    JobRecord& r = job.rec;
    {
        // A pipeline that reads or writes whole streams only (the GStreamer back end) runs whole.
        LOOM_ASSIGN_OR_RETURN(pipeline::PipelineNeeds needs, needs_of(r, job.config));
        if (!needs.whole_only.empty()) {
            log::info("daemon", "job {}: runs whole, not in segments ({}); a restart redoes it from its start", r.id,
                      needs.whole_only);
            const std::vector<SegmentRecord> whole{SegmentRecord{0, -1}};
            LOOM_TRY(journal_->set_plan(r.id, whole, 0));
            std::lock_guard lock(mutex_);
            r.segments = whole;
            r.frames_total = 0;
            return {};
        }
    }
    preprocess::ReaderOptions ro;
    ro.hwaccel = "none";
    ro.interrupted = [&job] { return job.stop.load(); };
    double duration = 0;
    {
        LOOM_ASSIGN_OR_RETURN(auto reader, preprocess::MediaReader::open(r.input, ro));
        duration = reader->info().duration_s;
    }
    std::vector<SegmentRecord> segments;
    int64_t total = 0;
    Result<std::vector<preprocess::KeyframeInfo>> keys = preprocess::list_keyframes(r.input, ro, &total);
    if (keys.ok() && total > 0) {
        // At most kSegmentsMax: the join opens every part at once, and each segment's reader
        // scans the file's keyframes. A longer film gets longer segments.
        const int n = static_cast<int>(
            std::clamp(std::ceil(duration / job.config.segment_seconds), 1.0, static_cast<double>(kSegmentsMax)));
        job.ranges = preprocess::plan_segments(*keys, total, n);
        for (const preprocess::SegmentRange& s : job.ranges) segments.push_back({s.start_frame, s.frame_count});
    }
    if (segments.empty()) {
        if (job.stop.load()) return make_error(StatusCode::CANCELLED, "job {}: stopped while planning", r.id);
        // No segments on this file (packets without timestamps, say): one run over the whole
        // file, which a restart redoes from its start.
        log::warn("daemon", "job {}: {} cannot be cut into segments ({}); it runs whole", r.id, r.input,
                  keys.ok() ? std::string("no frames counted") : keys.status().message());
        segments.push_back({0, -1});
        total = 0;
    }
    LOOM_TRY(journal_->set_plan(r.id, segments, total));
    std::lock_guard lock(mutex_);
    r.segments = std::move(segments);
    r.frames_total = total;
    return {};
}

// The pts bounds of a resumed job's recorded plan, from one scan of its input (the plan in the
// journal holds frame ranges): each segment starts on the keyframe at its start frame and ends
// where the next begins. Left empty when the file's keyframes no longer match the plan; each
// segment then scans for itself and fails naming the frame.
void JobManager::find_ranges(Job& job) {
    job.ranges.clear();
    std::vector<SegmentRecord> segs;
    {
        std::lock_guard lock(mutex_);
        segs = job.rec.segments;
    }
    if (segs.empty() || segs.front().frame_count <= 0) return;
    preprocess::ReaderOptions ro;
    ro.hwaccel = "none";
    ro.interrupted = [&job] { return job.stop.load(); };
    int64_t total = 0;
    Result<std::vector<preprocess::KeyframeInfo>> keys = preprocess::list_keyframes(job.rec.input, ro, &total);
    if (!keys.ok()) return;
    std::map<int64_t, int64_t> key_pts;  // frame -> pts of the keyframes segments start on
    for (const preprocess::KeyframeInfo& k : *keys)
        if (k.segment_start) key_pts[k.frame] = k.pts;
    std::vector<preprocess::SegmentRange> ranges;
    for (const SegmentRecord& s : segs) {
        preprocess::SegmentRange r{s.start_frame, s.frame_count, INT64_MIN, INT64_MAX};
        if (s.start_frame > 0) {
            auto it = key_pts.find(s.start_frame);
            if (it == key_pts.end()) return;
            r.copy_from_pts = it->second;
        }
        if (!ranges.empty()) ranges.back().copy_to_pts = r.copy_from_pts;
        ranges.push_back(r);
    }
    if (segs.back().start_frame + segs.back().frame_count < total) return;  // the plan does not reach the end
    job.ranges = std::move(ranges);
}

Status JobManager::run_segments(Job& job) {
    const int64_t id = job.rec.id;
    if (job.rec.segments.empty()) LOOM_TRY(plan(job));
    if (job.ranges.size() != job.rec.segments.size()) find_ranges(job);
    const std::string dir = fmt::format("{}/{}", job.config.jobs_dir(), id);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        fs::create_directories(dir, ec);
        if (ec) return make_error(StatusCode::IO_ERROR, "{}: cannot create the job's folder: {}", dir, ec.message());
        LOOM_TRY(sync_to_disk(dir));  // the folder's entry survives a power cut with its parts
    }
    const std::string ext = fs::path(job.rec.output).extension().string();
    // What a killed run left in the folder besides recorded parts (a writer's temporary file,
    // a part renamed but not recorded) goes: it is redone.
    for (const fs::path& e : entries_of(dir)) {
        const std::string name = e.filename().string();
        size_t index = SIZE_MAX;
        if (name.rfind("part-", 0) == 0) index = std::strtoull(name.c_str() + 5, nullptr, 10);
        std::lock_guard lock(mutex_);
        if (index >= job.rec.segments.size() || !job.rec.segments[index].done) fs::remove_all(e, ec);
    }
    std::vector<std::string> parts;
    int64_t frames_before = 0;
    for (size_t i = 0; i < job.rec.segments.size(); ++i) {
        const std::string part = fmt::format("{}/part-{:05}{}", dir, i, ext);
        parts.push_back(part);
        SegmentRecord seg;
        {
            std::lock_guard lock(mutex_);
            seg = job.rec.segments[i];
        }
        if (seg.done) {
            // Recorded: its part must be there, whole (the writer renames only complete files).
            if (!is_regular(part))
                return make_error(StatusCode::FAILED_PRECONDITION,
                                  "job {}: segment {} is recorded but its part {} is gone", id, i, part);
            frames_before += seg.frames;
            continue;
        }
        fs::remove(part, ec);  // there but not recorded: redone, never trusted
        pipeline::RunOptions o;
        o.context = context_;
        o.input = job.rec.input;
        o.output = part;
        o.sets = job.rec.sets;
        if (seg.frame_count > 0) {
            o.segment = pipeline::RunOptions::Segment{seg.start_frame, seg.frame_count, {}};
            if (i < job.ranges.size() && job.ranges[i].start_frame == seg.start_frame)
                o.segment->pts = preprocess::ReaderOptions::SegmentPts{job.ranges[i].copy_from_pts,
                                                                        job.ranges[i].copy_to_pts};
        }
        o.models_dir = job.config.models_dir;
        o.cache_dir = job.config.cache_dir;
        o.stop_flag = &job.stop;
        const auto t0 = std::chrono::steady_clock::now();
        LOOM_ASSIGN_OR_RETURN(auto p, pipeline::Pipeline::create(
                                          pipeline::PipelineSource::from_text(job.rec.pipeline, job.rec.pipeline_text,
                                                                              job.rec.base_dir),
                                          o));
        job.frames_done = frames_before;
        int64_t last_frames = 0;
        job.frames_moved_s = steady_now_s();
        job.in_run = true;
        Status st = p->run([&](const pipeline::Progress& pr) {
            if (pr.frames_done > 0) crash_point("mid-segment", static_cast<int64_t>(i));
            job.frames_done = frames_before + pr.frames_done;
            job.fps = pr.fps;
            {
                std::lock_guard lock(mutex_);
                job.stages = pr.stages;
            }
            if (pr.frames_done != last_frames) {
                {
                    std::lock_guard lock(mutex_);
                    counts_.frames += pr.frames_done - last_frames;
                }
                last_frames = pr.frames_done;
                job.frames_moved_s = steady_now_s();
            }
            publish(job, "progress");
        });
        job.in_run = false;
        if (!st.ok()) return st;
        const nlohmann::json summary = p->summary();
        p.reset();
        crash_point("part-renamed", static_cast<int64_t>(i));
        SegmentRecord done = seg;
        done.done = true;
        done.frames = summary.value("frames", int64_t{0});
        done.bytes = static_cast<int64_t>(fs::file_size(part, ec));
        done.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        {
            std::lock_guard lock(mutex_);
            counts_.frames += done.frames - last_frames;
        }
        // On the disk before it is recorded: a power cut must not leave a record of a part whose
        // data never reached the disk.
        LOOM_TRY(sync_to_disk(part));
        LOOM_TRY(journal_->segment_done(id, i, done));
        crash_point("recorded", static_cast<int64_t>(i));
        frames_before += done.frames;
        {
            std::lock_guard lock(mutex_);
            job.rec.segments[i] = done;
            if (job.rec.frames_total == 0 && seg.frame_count < 0) job.rec.frames_total = done.frames;
        }
        job.frames_done = frames_before;
        publish(job, "progress");
        if (job.stop.load()) return make_error(StatusCode::CANCELLED, "job {}: stopped after segment {}", id, i);
    }
    // Every part is recorded: the join (a temporary name, renamed at the end) makes the output,
    // where the submit's checks still hold: its folder inside the allowed ones (a link swapped in
    // since is refused) and writable. The output itself may exist: a join that a crash cut off
    // after its rename runs again.
    {
        Result<std::string> out = check_job_output(PathPolicy{job.config.allow}, "output", job.rec.output, true);
        if (!out.ok()) return out.status().with_context(fmt::format("job {}: before the join", id));
        if (*out != job.rec.output)
            return make_error(StatusCode::FAILED_PRECONDITION,
                              "job {}: before the join: 'output' {} now resolves to {} (a link changed since the "
                              "submit)",
                              id, job.rec.output, *out);
    }
    remove_stale_partials(job.rec.output);
    crash_point("joining", -1);
    LOOM_TRY(preprocess::join_segments(parts, job.rec.output).with_context(fmt::format("job {}: joining", id)));
    if (parts.size() > 1) LOOM_TRY(check_join(job, parts, frames_before));
    // The output durable before the job is marked done and its parts removed.
    LOOM_TRY(sync_to_disk(job.rec.output));
    crash_point("joined", -1);
    return {};
}

}  // namespace loom::daemon
