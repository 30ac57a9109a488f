#include "core/placements/shared_host_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/base/text_list.h"
#include "core/exchange/group_agreement.h"
#include "core/lookup/lookup_whole_table.h"
#include "core/model/table_fill.h"
#include "core/placements/private_host_rows.h"

namespace engram {
namespace {

// What each member tells its copy group: its PID namespace and, from the
// writer, where its memfds are. Fixed size, so one all-gather carries it.
constexpr size_t kNamespaceChars = 96;
struct MemberRecordHead {
  int64_t pid = -1;
  char pid_namespace[kNamespaceChars] = {};
};

class SharedHostCopy final : public PlacementTables {
 public:
  SharedHostCopy(PlacementContext& context, Collectives& copy_group, std::unique_ptr<Collectives> owned_copy_group,
                 HostCopyBacking backing, const char* placement)
      : context_(context), copy_(copy_group), owned_copy_group_(std::move(owned_copy_group)), backing_(backing),
        placement_(placement) {}

  // Local clean-up: unmap; a file's writer also removes names it still holds.
  ~SharedHostCopy() override {
    readers_.clear();
    created_.clear();
    remove_file_names().ignore();
  }

  Status lookup(int table_index, const LookupRequest& request) override {
    const ShmMapping* map = mapping(static_cast<size_t>(table_index));
    return lookup_host_copy(context_.tp_group, request, map ? map->data() : std::span<const std::byte>(), placement_);
  }

  bool device_lookup_ready() const override { return false; }

  Status lookup_device(int, const DeviceLookupRequest&) override {
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("{} looks its rows up on the CPU here (its host copy is not registered with the "
                              "device); use the host lookup",
                              placement_),
                  {copy_.world_rank(), -1, "lookup"});
  }

  Status release() override {
    readers_.clear();
    created_.clear();
    return remove_file_names();
  }

  Status build() {
    const bool writer = copy_.rank() == 0;
    const size_t tables = context_.model.tables.size();
    int gone = -1;
    // 1. The writer creates and fills one memfd (or table file) per table.
    Status made;
    if (writer) {
      ProcessSharedMemory& memory = *context_.backend.memfd;
      for (const TableSpec& spec : context_.model.tables) {
        Result<std::unique_ptr<ShmMapping>> created = std::unique_ptr<ShmMapping>();
        if (backing_ == HostCopyBacking::kMemfd) {
          auto memfd = memory.create(fmt::format("engramlab_{}_layer{}", placement_, spec.layer_id), spec.table_bytes());
          if (memfd.is_ok()) {
            fds_.push_back(memfd.value()->owner());
            created = std::unique_ptr<ShmMapping>(std::move(memfd).value());
          } else {
            created = std::move(memfd).take_status();
          }
        } else {
          created = memory.create_file(file_name(spec), spec.table_bytes());
          if (created.is_ok()) file_names_.push_back(file_name(spec));
        }
        if (!created.is_ok()) {
          made = std::move(created).take_status().with_context(copy_.world_rank(), -1, step("create"));
          break;
        }
        fill_table_rows_parallel(spec, context_.fill_seed, 0, created.value()->bytes(),
                                 fill_threads_for(spec.table_bytes()));
        footprint_.shared_host_bytes += spec.table_bytes();
        created_.push_back(std::move(created).value());
      }
    }
    ENGRAM_RETURN_IF_ERROR(undo_if_failed(agree_on_status(copy_, made, "host copy create", &gone)));
    if (backing_ == HostCopyBacking::kFile) return open_files(gone);

    // 2. Every member learns the writer's fds and every member's PID namespace.
    Result<std::string> ns = context_.backend.memfd->pid_namespace();
    std::vector<std::byte> mine(record_bytes(tables));
    MemberRecordHead head;
    if (ns.is_ok()) std::strncpy(head.pid_namespace, ns->c_str(), kNamespaceChars - 1);
    else std::strncpy(head.pid_namespace, "(unreadable)", kNamespaceChars - 1);
    if (writer && !fds_.empty()) head.pid = fds_.front().pid;
    std::memcpy(mine.data(), &head, sizeof head);
    for (size_t t = 0; t < fds_.size(); ++t) {
      const int32_t fd = fds_[t].fd;
      std::memcpy(mine.data() + sizeof head + t * sizeof fd, &fd, sizeof fd);
    }
    std::vector<std::byte> all(mine.size() * static_cast<size_t>(copy_.size()));
    ENGRAM_RETURN_IF_ERROR(undo_if_failed(copy_.all_gather(mine, all)));
    ENGRAM_RETURN_IF_ERROR(undo_if_failed(same_pid_namespace(all)));

    // 3. The others open the writer's memfds through /proc.
    Status opened;
    if (!writer) {
      MemberRecordHead w;
      std::memcpy(&w, all.data(), sizeof w);
      for (size_t t = 0; t < tables && opened.is_ok(); ++t) {
        ProcessFdRef ref{w.pid, -1};
        std::memcpy(&ref.fd, all.data() + sizeof w + t * sizeof ref.fd, sizeof ref.fd);
        auto map = context_.backend.memfd->open_read_only(ref, context_.model.tables[t].table_bytes());
        if (!map.is_ok()) {
          opened = std::move(map).take_status().with_context(copy_.world_rank(), world_ranks_[0], "memfd_open");
          break;
        }
        readers_.push_back(std::move(map).value());
      }
    }
    return undo_if_failed(agree_on_status(copy_, opened, "memfd table open", &gone));
  }

 private:
  std::string file_name(const TableSpec& spec) const {
    // In /tmp, shared like /dev/shm: the same unguessable part (core/backend/host_shared_memory.h).
    return fmt::format("{}layer{}.table", shm_segment_prefix(context_.job_id, context_.shm_name_part), spec.layer_id);
  }
  std::string step(const char* what) const {
    return fmt::format("{}_{}", backing_ == HostCopyBacking::kMemfd ? "memfd" : "table_file", what);
  }

  // The others map the files by name; once every member has, the writer
  // removes the names (the maps keep the pages), as host_shared does.
  Status open_files(int& gone) {
    Status opened;
    if (copy_.rank() != 0) {
      for (const TableSpec& spec : context_.model.tables) {
        auto map = context_.backend.memfd->open_file_read_only(file_name(spec), spec.table_bytes());
        if (!map.is_ok()) {
          opened = std::move(map).take_status().with_context(copy_.world_rank(), -1, step("open"));
          break;
        }
        readers_.push_back(std::move(map).value());
      }
    }
    ENGRAM_RETURN_IF_ERROR(undo_if_failed(agree_on_status(copy_, opened, "table file open", &gone)));
    return remove_file_names();
  }

  // The writer's names still on disk go; the first failure is returned.
  Status remove_file_names() {
    Status first;
    for (const std::string& name : file_names_) {
      const Status removed = context_.backend.memfd->remove_file(name);
      if (first.is_ok() && !removed.is_ok() && removed.code() != ErrorCode::kNotFound) first = removed;
    }
    file_names_.clear();
    return first;
  }

  static size_t record_bytes(size_t tables) { return sizeof(MemberRecordHead) + tables * sizeof(int32_t); }

  const ShmMapping* mapping(size_t table) const {
    if (table < created_.size()) return created_[table].get();
    if (table < readers_.size()) return readers_[table].get();
    return nullptr;
  }

  std::string namespace_of(const std::vector<std::byte>& all, int member) const {
    MemberRecordHead h;
    std::memcpy(&h, all.data() + static_cast<size_t>(member) * record_bytes(context_.model.tables.size()), sizeof h);
    return std::string(h.pid_namespace, strnlen(h.pid_namespace, kNamespaceChars));
  }

  // Every member compares every namespace with the writer's, so all fail
  // alike, with the same words, before anyone opens a path that in another
  // namespace names another process's fd.
  Status same_pid_namespace(const std::vector<std::byte>& all) {
    std::vector<int32_t> me{copy_.world_rank()};
    std::vector<int32_t> ranks(static_cast<size_t>(copy_.size()));
    ENGRAM_RETURN_IF_ERROR(copy_.all_gather(std::as_bytes(std::span(me)), std::as_writable_bytes(std::span(ranks))));
    world_ranks_.assign(ranks.begin(), ranks.end());
    const std::string writer_ns = namespace_of(all, 0);
    std::map<std::string, std::vector<int>> others;  // namespace -> world ranks
    for (int m = 1; m < copy_.size(); ++m) {
      const std::string ns = namespace_of(all, m);
      if (ns != writer_ns) others[ns].push_back(world_ranks_[static_cast<size_t>(m)]);
    }
    if (others.empty()) return Status::ok();
    std::vector<int> outside;
    std::string where;
    for (const auto& [ns, members] : others) {
      outside.insert(outside.end(), members.begin(), members.end());
      where += fmt::format("{}rank{} {} in {}", where.empty() ? "" : ", ", members.size() == 1 ? "" : "s",
                           compress_ranges(members), ns);
    }
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("{}: rank{} {} cannot open rank {}'s memfd through /proc/<pid>/fd/<n>: rank {} is in PID "
                              "namespace {}, {}; SGLang's shared host table needs the ranks that share a copy in one "
                              "PID namespace: share it (docker run --pid=host, or one Kubernetes pod with "
                              "shareProcessNamespace: true), or set config.placement: sglang_private",
                              placement_, outside.size() == 1 ? "" : "s", compress_ranges(outside), world_ranks_[0],
                              world_ranks_[0], writer_ns, where),
                  {copy_.world_rank(), copy_.world_rank() == world_ranks_[0] ? -1 : world_ranks_[0], "memfd_open"});
  }

  // Nothing outlives a failed build: maps (and the writer's fds) go.
  Status undo_if_failed(Status status) {
    if (status.is_ok()) return status;
    readers_.clear();
    created_.clear();
    fds_.clear();
    const Status removed = remove_file_names();
    footprint_.shared_host_bytes = 0;
    if (!removed.is_ok())
      return Status(status.code(), status.message() + "; also could not remove a table file: " + removed.to_string(),
                    status.context());
    return status;
  }

  PlacementContext context_;  // a copy: the groups, backend and model it names outlive these tables
  Collectives& copy_;
  std::unique_ptr<Collectives> owned_copy_group_;  // copy_, where split for these tables
  HostCopyBacking backing_;
  const char* placement_;
  std::vector<int> world_ranks_;                       // the copy group's members, by member
  std::vector<ProcessFdRef> fds_;                      // the writer's memfds, per table
  std::vector<std::string> file_names_;                // the writer's table files still named
  std::vector<std::unique_ptr<ShmMapping>> created_;   // the writer's, per table
  std::vector<std::unique_ptr<ShmMapping>> readers_;   // everyone else's, per table
};

}  // namespace

Result<std::unique_ptr<PlacementTables>> build_shared_host_copy(PlacementContext& context, Collectives& copy_group,
                                                                std::unique_ptr<Collectives> owned_copy_group,
                                                                HostCopyBacking backing, const char* placement) {
  ENGRAM_CHECK(owned_copy_group == nullptr || owned_copy_group.get() == &copy_group);
  if (context.backend.memfd == nullptr)
    return Status(ErrorCode::kFailedPrecondition,
                  fmt::format("{} needs host memory shared between processes (memfds, table files), and this rank's "
                              "backend has none",
                              placement),
                  {context.backend.world_rank, -1, "start"});
  auto tables = std::make_unique<SharedHostCopy>(context, copy_group, std::move(owned_copy_group), backing, placement);
  ENGRAM_RETURN_IF_ERROR(tables->build());
  return std::unique_ptr<PlacementTables>(std::move(tables));
}

Status lookup_host_copy(Collectives& tp_group, const LookupRequest& request, std::span<const std::byte> table_bytes,
                        const char* placement) {
  return lookup_whole_table_on_tp_rank(tp_group, request, table_bytes,
                                       fmt::format("{}: the host copy", placement));
}

}  // namespace engram
