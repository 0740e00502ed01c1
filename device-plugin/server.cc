// DevicePluginServer: the kubelet's device plugin API over gRPC (see server.h).

#include "device-plugin/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpushare::deviceplugin {

namespace api = ::v1beta1;

namespace {

constexpr char kApiVersion[] = "v1beta1";

// The inode of `path`, 0 when absent.
ino_t InodeOf(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// When `path` was last modified (Unix time, ns), 0 when absent: for the
// kubelet's socket, when the kubelet started.
int64_t ModifiedNsOf(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case absl::StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case absl::StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case absl::StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case absl::StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    default: break;
  }
  return grpc::Status(code, std::string(s.message()));
}

std::string ResourceFileName(const std::string& resource) {
  std::string name = "gpushare-" + resource.substr(resource.find('/') + 1) + ".sock";
  return name;
}

}  // namespace

// One resource's DevicePlugin service; the state is the server's.
class ResourceService final : public api::DevicePlugin::Service {
 public:
  ResourceService(DevicePluginServer::Impl* server, Resource resource)
      : server_(server), resource_(resource) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const api::Empty*,
                                      api::DevicePluginOptions* reply) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const api::Empty*,
                            grpc::ServerWriter<api::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const api::PreferredAllocationRequest* request,
                                      api::PreferredAllocationResponse* reply) override;
  grpc::Status Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                        api::AllocateResponse* reply) override;
  grpc::Status PreStartContainer(grpc::ServerContext*, const api::PreStartContainerRequest*,
                                 api::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  DevicePluginServer::Impl* server_;
  Resource resource_;
};

struct DevicePluginServer::Impl {
  Inventory inventory;
  Options options;
  PodLister list_pods;
  AssignedHook mark_assigned;
  std::vector<Resource> resources;

  mutable std::mutex mu;
  std::condition_variable changed;
  uint64_t generation = 0;  // Bumped on every health change.
  bool stopping = false;
  std::map<int, std::string> unhealthy;
  Ledger ledger;
  ServerStats stats;
  std::set<std::string> skipped_seen;  // Unreadable pods already logged.

  // The node's pods; an unreadable pod is left out, counted and logged once.
  absl::StatusOr<std::vector<NodePod>> ListPods() {
    std::vector<std::string> skipped;
    absl::StatusOr<std::vector<NodePod>> pods = list_pods(&skipped);
    if (skipped.empty()) return pods;
    std::lock_guard lock(mu);
    stats.skipped_pods = static_cast<int64_t>(skipped.size());
    for (const std::string& why : skipped) {
      if (skipped_seen.insert(why).second) {
        std::fprintf(stderr, "gpushare-device-plugin: left out a pod that cannot be read: %s\n",
                     why.c_str());
      }
    }
    return pods;
  }

  // One gRPC server per resource, and the kubelet socket seen at Register.
  std::vector<std::unique_ptr<ResourceService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  ino_t kubelet_inode = 0;

  std::string SocketPath(Resource r) const {
    return options.plugin_dir + "/" + ResourceFileName(ResourceName(r));
  }
  std::string KubeletSocket() const {
    return options.plugin_dir + "/" + options.kubelet_socket_name;
  }

  absl::Status Serve() {
    StopServers();
    {
      std::lock_guard lock(mu);
      stopping = false;
    }
    for (Resource r : resources) {
      const std::string path = SocketPath(r);
      unlink(path.c_str());
      auto service = std::make_unique<ResourceService>(this, r);
      grpc::ServerBuilder builder;
      builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
      builder.RegisterService(service.get());
      std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
      if (server == nullptr) {
        StopServers();
        return absl::FailedPreconditionError(absl::StrCat("cannot serve gRPC on ", path));
      }
      services.push_back(std::move(service));
      servers.push_back(std::move(server));
    }
    return absl::OkStatus();
  }

  void StopServers() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    changed.notify_all();
    for (auto& s : servers) s->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    for (auto& s : servers) s->Wait();
    servers.clear();
    services.clear();
    for (Resource r : resources) unlink(SocketPath(r).c_str());
  }

  absl::Status RegisterAll() {
    const std::string kubelet = KubeletSocket();
    kubelet_inode = InodeOf(kubelet);
    {
      // Pods bound before the kubelet started are admitted by creation time.
      std::lock_guard lock(mu);
      ledger.set_kubelet_start_ns(ModifiedNsOf(kubelet));
    }
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel("unix:" + kubelet, grpc::InsecureChannelCredentials());
    auto stub = api::Registration::NewStub(channel);
    for (Resource r : resources) {
      api::RegisterRequest request;
      request.set_version(kApiVersion);
      request.set_endpoint(ResourceFileName(ResourceName(r)));
      request.set_resource_name(ResourceName(r));
      request.mutable_options()->set_get_preferred_allocation_available(true);
      api::Empty reply;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      grpc::Status s = stub->Register(&context, request, &reply);
      if (!s.ok()) {
        const absl::StatusCode code = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                              s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                          ? absl::StatusCode::kUnavailable
                                          : absl::StatusCode::kFailedPrecondition;
        return absl::Status(code, absl::StrCat("registering ", ResourceName(r), " with ", kubelet,
                                               ": ", s.error_message()));
      }
    }
    return absl::OkStatus();
  }

  // The devices of `r`, with health, under `mu`.
  api::ListAndWatchResponse DevicesLocked(Resource r) const {
    api::ListAndWatchResponse reply;
    for (int g = 0; g < inventory.gpu_count(); ++g) {
      const GpuInfo& gpu = inventory.gpus()[g];
      const char* health = unhealthy.count(g) > 0 ? "Unhealthy" : "Healthy";
      auto add = [&](const std::string& id) {
        api::Device* d = reply.add_devices();
        d->set_id(id);
        d->set_health(health);
        if (gpu.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(gpu.numa_node);
      };
      if (r == Resource::kGpuMem) {
        for (int64_t k = 0; k < inventory.units(g); ++k) add(inventory.MemDeviceId(g, k));
      } else {
        add(gpu.uuid);
      }
    }
    return reply;
  }
};

grpc::Status ResourceService::GetDevicePluginOptions(grpc::ServerContext*, const api::Empty*,
                                                     api::DevicePluginOptions* reply) {
  reply->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status ResourceService::ListAndWatch(grpc::ServerContext* context, const api::Empty*,
                                           grpc::ServerWriter<api::ListAndWatchResponse>* writer) {
  uint64_t sent = 0;
  std::unique_lock lock(server_->mu);
  for (bool first = true;; first = false) {
    if (server_->stopping || context->IsCancelled()) return grpc::Status::OK;
    if (first || server_->generation != sent) {
      sent = server_->generation;
      api::ListAndWatchResponse reply = server_->DevicesLocked(resource_);
      lock.unlock();
      if (!writer->Write(reply)) return grpc::Status::OK;
      lock.lock();
      continue;
    }
    // Woken by a change or Stop(); the timeout notices a cancelled stream.
    server_->changed.wait_for(lock, std::chrono::milliseconds(500));
  }
}

grpc::Status ResourceService::GetPreferredAllocation(
    grpc::ServerContext*, const api::PreferredAllocationRequest* request,
    api::PreferredAllocationResponse* reply) {
  DevicePluginServer::Impl& s = *server_;
  const Inventory& inv = s.inventory;
  // The scheduler's plan for each container. The pods come from the
  // program's cache, which may not have a pod bound a moment ago yet: while
  // a container has no plan, they are listed again for a short while.
  std::vector<absl::StatusOr<Grant>> plans;
  const auto deadline = std::chrono::steady_clock::now() + s.options.identify_wait;
  std::unique_lock lock(s.mu, std::defer_lock);
  while (resource_ != Resource::kGpuCount) {
    absl::StatusOr<std::vector<NodePod>> pods = s.ListPods();
    lock.lock();
    plans.clear();
    bool all = true;
    for (const api::ContainerPreferredAllocationRequest& want : request->container_requests()) {
      plans.push_back(pods.ok() ? s.ledger.Match(resource_, want.allocation_size(), *pods, inv,
                                                 s.options.allocation)
                                : absl::StatusOr<Grant>(pods.status()));
      all = all && plans.back().ok();
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    s.changed.wait_for(lock, std::chrono::milliseconds(50), [&] { return s.stopping; });
    lock.unlock();
  }
  if (!lock.owns_lock()) lock.lock();
  // GPUs to stay off: unhealthy ones and those the other resource holds.
  std::set<int> avoid;
  for (const auto& [g, why] : s.unhealthy) avoid.insert(g);
  const Resource other = resource_ == Resource::kGpuMem ? Resource::kWholeGpu : Resource::kGpuMem;
  for (const HeldDevice& d : s.ledger.Held()) {
    if (d.resource == other) avoid.insert(d.gpu);
  }
  for (int i = 0; i < request->container_requests_size(); ++i) {
    const api::ContainerPreferredAllocationRequest& want = request->container_requests(i);
    api::ContainerPreferredAllocationResponse* out = reply->add_container_responses();
    const int size = want.allocation_size();
    std::vector<std::string> chosen(want.must_include_deviceids().begin(),
                                    want.must_include_deviceids().end());
    std::set<std::string> taken(chosen.begin(), chosen.end());
    auto take = [&](const std::string& id) {
      if (static_cast<int>(chosen.size()) >= size || !taken.insert(id).second) return false;
      chosen.push_back(id);
      return true;
    };
    const absl::StatusOr<Grant> grant =
        i < static_cast<int>(plans.size()) ? plans[i] : absl::NotFoundError("");
    if (grant.ok()) {
      // Units of each planned GPU first, in the kubelet's order of ids.
      for (size_t k = 0; k < grant->gpus.size(); ++k) {
        if (avoid.count(grant->gpus[k]) > 0) continue;
        int64_t need = grant->units[k];
        for (const std::string& id : chosen) need -= inv.GpuOfDevice(id) == grant->gpus[k];
        for (const std::string& id : want.available_deviceids()) {
          if (need <= 0) break;
          if (inv.GpuOfDevice(id) == grant->gpus[k] && take(id)) --need;
        }
      }
    }
    // Then any GPU not to be avoided; the others only when nothing else is left.
    for (bool last_resort : {false, true}) {
      for (const std::string& id : want.available_deviceids()) {
        std::optional<int> g = inv.GpuOfDevice(id);
        if (last_resort || (g.has_value() && avoid.count(*g) == 0)) take(id);
      }
    }
    for (const std::string& id : chosen) out->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status ResourceService::Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                                       api::AllocateResponse* reply) {
  DevicePluginServer::Impl& s = *server_;
  auto fail = [&](const absl::Status& status) {
    std::lock_guard lock(s.mu);
    ++s.stats.failed_allocations;
    std::fprintf(stderr, "gpushare-device-plugin: Allocate %s: %s\n", ResourceName(resource_),
                 std::string(status.message()).c_str());
    return ToGrpc(status);
  };
  // The ids decide what each container gets; the pods only tell whose it is.
  for (const api::ContainerAllocateRequest& want : request->container_requests()) {
    std::vector<std::string> ids(want.devices_ids().begin(), want.devices_ids().end());
    absl::StatusOr<DeviceSet> devices = DevicesOf(resource_, ids, s.inventory);
    if (!devices.ok()) return fail(devices.status());
  }
  // The pods, from the program's cache: a pod bound a moment ago may not be
  // there yet, so a container not told is tried again for a short while.
  const auto deadline = std::chrono::steady_clock::now() + s.options.identify_wait;
  absl::StatusOr<std::vector<NodePod>> pods;
  std::vector<Grant> grants;
  absl::Status refused;
  for (bool done = false; !done;) {
    const int64_t listed_at = SteadyNs();
    pods = s.ListPods();
    if (!pods.ok()) pods = std::vector<NodePod>();
    grants.clear();
    refused = absl::OkStatus();
    std::unique_lock lock(s.mu);
    s.ledger.Prune(*pods, listed_at);
    // Several containers in one call are granted in order; each grant is
    // recorded at once so the next is not told the same container.
    Ledger trial = s.ledger;
    bool all_told = true;
    for (const api::ContainerAllocateRequest& want : request->container_requests()) {
      std::vector<std::string> ids(want.devices_ids().begin(), want.devices_ids().end());
      absl::StatusOr<Grant> grant =
          trial.Allocate(resource_, ids, *pods, s.inventory, s.options.allocation);
      if (grant.ok()) {
        for (int g : grant->gpus) {
          if (auto bad = s.unhealthy.find(g); bad != s.unhealthy.end()) {
            grant = absl::FailedPreconditionError(
                absl::StrCat("GPU ", g, " (", s.inventory.gpus()[g].uuid,
                             ") is unhealthy: ", bad->second));
            break;
          }
        }
      }
      if (!grant.ok()) {
        refused = grant.status();
        break;
      }
      all_told = all_told && grant->identified;
      trial.Record(*grant, SteadyNs());
      grants.push_back(*std::move(grant));
    }
    done = !refused.ok() || all_told || std::chrono::steady_clock::now() >= deadline;
    if (done && refused.ok()) {
      s.ledger = std::move(trial);
      s.stats.allocations += static_cast<int64_t>(grants.size());
      for (const Grant& g : grants) {
        s.stats.unidentified += !g.identified;
        s.stats.disagreements += g.disagrees;
      }
    }
    if (!done) s.changed.wait_for(lock, std::chrono::milliseconds(50), [&] { return s.stopping; });
  }
  if (!refused.ok()) return fail(refused);
  for (const Grant& g : grants) {
    api::ContainerAllocateResponse* out = reply->add_container_responses();
    std::vector<const GpuInfo*> gpus;
    for (int i : g.gpus) gpus.push_back(&s.inventory.gpus()[i]);
    const ContainerDevices devices =
        DeviceListFor(gpus, ResourceName(resource_), s.options.device_list);
    std::map<std::string, std::string> env = g.env;
    env.erase("NVIDIA_VISIBLE_DEVICES");  // As the strategies say, below.
    for (const auto& [k, v] : devices.envs) env[k] = v;
    for (const auto& [k, v] : env) (*out->mutable_envs())[k] = v;
    for (const ContainerDevices::Mount& m : devices.mounts) {
      api::Mount* mount = out->add_mounts();
      mount->set_container_path(m.container_path);
      mount->set_host_path(m.host_path);
      mount->set_read_only(m.read_only);
    }
    for (const ContainerDevices::Device& d : devices.devices) {
      api::DeviceSpec* spec = out->add_devices();
      spec->set_container_path(d.container_path);
      spec->set_host_path(d.host_path);
      spec->set_permissions(d.permissions);
    }
    for (const auto& [k, v] : devices.annotations) (*out->mutable_annotations())[k] = v;
    for (const std::string& name : devices.cdi_devices) out->add_cdi_devices()->set_name(name);
    const std::string who = g.identified
                                ? absl::StrCat(g.pod, " container ", g.container)
                                : std::string("a container of a pod not told");
    std::fprintf(stderr, "gpushare-device-plugin: %s: %s GPUs %s%s\n", who.c_str(),
                 ResourceName(resource_), absl::StrJoin(g.gpus, ",").c_str(),
                 g.disagrees ? " (the kubelet's devices, not the GPUs its annotations name: they "
                               "will be corrected)"
                             : "");
    if (g.identified && g.completes_pod && s.mark_assigned) {
      for (const NodePod& p : *pods) {
        if (p.uid != g.pod_uid) continue;
        absl::Status marked = s.mark_assigned(p);
        if (!marked.ok()) {
          std::fprintf(stderr, "gpushare-device-plugin: marking %s assigned: %s\n", g.pod.c_str(),
                       std::string(marked.message()).c_str());
        }
      }
    }
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<DevicePluginServer>> DevicePluginServer::Start(
    Inventory inventory, Options options, PodLister list_pods, AssignedHook mark_assigned) {
  if (!options.exclusive_resource.empty() && options.exclusive_resource != "nvidia.com/gpu") {
    return absl::InvalidArgumentError(absl::StrCat("exclusive resource \"",
                                                   options.exclusive_resource,
                                                   "\" is neither \"\" nor nvidia.com/gpu"));
  }
  auto impl = std::make_unique<Impl>();
  impl->inventory = std::move(inventory);
  impl->options = std::move(options);
  impl->list_pods = std::move(list_pods);
  impl->mark_assigned = std::move(mark_assigned);
  impl->resources = {Resource::kGpuMem, Resource::kGpuCount};
  if (!impl->options.exclusive_resource.empty()) impl->resources.push_back(Resource::kWholeGpu);
  absl::Status served = impl->Serve();
  if (!served.ok()) return served;
  return std::unique_ptr<DevicePluginServer>(new DevicePluginServer(std::move(impl)));
}

DevicePluginServer::DevicePluginServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DevicePluginServer::~DevicePluginServer() { Stop(); }

absl::Status DevicePluginServer::Register() { return impl_->RegisterAll(); }

absl::Status DevicePluginServer::KeepRegistered(bool* reregistered) {
  if (reregistered) *reregistered = false;
  bool needed = InodeOf(impl_->KubeletSocket()) != impl_->kubelet_inode;
  for (Resource r : impl_->resources) needed = needed || InodeOf(impl_->SocketPath(r)) == 0;
  if (!needed) return absl::OkStatus();
  if (InodeOf(impl_->KubeletSocket()) == 0) {
    return absl::UnavailableError(absl::StrCat("the kubelet's socket ", impl_->KubeletSocket(),
                                               " is gone; waiting for it"));
  }
  if (reregistered) *reregistered = true;
  absl::Status served = impl_->Serve();
  if (!served.ok()) return served;
  return impl_->RegisterAll();
}

void DevicePluginServer::SetHealth(int gpu, bool healthy, const std::string& reason) {
  {
    std::lock_guard lock(impl_->mu);
    const bool was = impl_->unhealthy.count(gpu) == 0;
    if (healthy) {
      impl_->unhealthy.erase(gpu);
    } else {
      impl_->unhealthy[gpu] = reason;
    }
    if (was == healthy) return;
    ++impl_->generation;
  }
  impl_->changed.notify_all();
}

std::map<int, std::string> DevicePluginServer::Unhealthy() const {
  std::lock_guard lock(impl_->mu);
  return impl_->unhealthy;
}

std::vector<Ledger::Key> DevicePluginServer::ReconcileLedger(
    const std::vector<Ledger::Key>& kubelet, const std::vector<HeldDevice>& in_use,
    int64_t grace_ns) {
  std::lock_guard lock(impl_->mu);
  return impl_->ledger.Reconcile(kubelet, SteadyNs(), grace_ns, &in_use);
}

std::vector<HeldDevice> DevicePluginServer::Held() const {
  std::lock_guard lock(impl_->mu);
  return impl_->ledger.Held();
}

std::vector<std::string> DevicePluginServer::ResourceNames() const {
  std::vector<std::string> names;
  for (Resource r : impl_->resources) names.push_back(ResourceName(r));
  return names;
}

std::string DevicePluginServer::SocketPath(const std::string& resource_name) const {
  return impl_->options.plugin_dir + "/" + ResourceFileName(resource_name);
}

ServerStats DevicePluginServer::Stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

const Inventory& DevicePluginServer::inventory() const { return impl_->inventory; }

void DevicePluginServer::Stop() {
  if (impl_) impl_->StopServers();
}

}  // namespace gpushare::deviceplugin
