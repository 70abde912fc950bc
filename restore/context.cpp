#include "restore/context.hpp"

#include "common/log.hpp"
#include "device/spec.hpp"

namespace loom::restore {

Result<std::shared_ptr<DeviceContext>> DeviceContext::create(const ContextOptions& options) {
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(options.device));
    std::shared_ptr<DeviceContext> c(new DeviceContext());
    c->options_ = options;
    if (options.pool) {
        c->pool_ = options.pool;
    } else {
        c->own_pool_ = std::make_unique<ThreadPool>(options.threads);
        c->pool_ = c->own_pool_.get();
    }
    device::DeviceOptions d;
    d.pool = c->pool_;
    d.trace = options.trace;
    d.faults = options.faults;
    LOOM_ASSIGN_OR_RETURN(c->device_, device::Device::create(spec, d));
    return c;
}

DeviceContext::~DeviceContext() {
    if (device_) (void)device_->synchronize();
    device_.reset();
}

Result<SharedModel> DeviceContext::model(const std::string& key, const ModelBuild& build) {
    std::shared_ptr<std::mutex> building;
    {
        std::lock_guard lock(mutex_);
        for (auto it = entries_.begin(); it != entries_.end();)
            // An expired entry nobody is building in is dropped: the map holds live models only.
            it = it->second.model.expired() && it->second.building.use_count() == 1 ? entries_.erase(it)
                                                                                    : std::next(it);
        building = entries_[key].building;
    }
    std::lock_guard one_build(*building);
    {
        std::lock_guard lock(mutex_);
        if (auto m = entries_[key].model.lock()) {
            ++reuses_;
            weight_bytes_saved_ += m->weights().bytes();
            return SharedModel{std::move(m), true};
        }
    }
    LOOM_ASSIGN_OR_RETURN(std::shared_ptr<const compiler::CompiledModel> compiled, build());
    LOOM_ASSIGN_OR_RETURN(std::shared_ptr<executor::LoadedModel> loaded,
                          executor::LoadedModel::load(*device_, std::move(compiled)));
    std::lock_guard lock(mutex_);
    entries_[key].model = loaded;
    ++loads_;
    return SharedModel{std::move(loaded), false};
}

ModelCacheStats DeviceContext::model_cache() const {
    std::lock_guard lock(mutex_);
    ModelCacheStats s;
    s.loads = loads_;
    s.reuses = reuses_;
    s.weight_bytes_saved = weight_bytes_saved_;
    for (const auto& [key, e] : entries_)
        if (auto m = e.model.lock()) {
            ++s.models_live;
            s.weight_bytes_live += m->weights().bytes();
        }
    return s;
}

}  // namespace loom::restore
