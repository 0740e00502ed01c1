/* File: gpushare/c/gpushare.h
 * -----------------------------------------------------------------------------
 * gpushare's C ABI: the scheduler core for hosts that are not C++ (a Go
 * kube-scheduler plugin through cgo, a Rust or Python simulator through an
 * FFI). It is a thin layer over gpushare::Scheduler and, for Kubernetes
 * objects, gpushare::k8s::Extender: the same rules, the same messages.
 *
 *   gs_scheduler* s = NULL;
 *   gs_scheduler_options o;
 *   gs_scheduler_options_init(&o);              // binpack, 60 s reservations
 *   gs_status* st = gs_scheduler_create(&o, &s);
 *   if (st) { fprintf(stderr, "%s\n", gs_status_message(st)); gs_status_free(st); }
 *
 *   int64_t mem[2] = {16, 16};
 *   gs_node n;
 *   gs_node_init(&n);
 *   n.name = "n1"; n.gpu_count = 2; n.gpu_memory = mem;
 *   st = gs_scheduler_add_node(s, &n);
 *
 *   gs_request r;
 *   gs_request_init(&r);
 *   r.id = "default/p1"; r.gpu_memory = 4;
 *   gs_pod* pod = NULL;
 *   st = gs_pod_from_request(&r, &pod);
 *   gs_placement* p = NULL;
 *   st = gs_scheduler_reserve(s, pod, "n1", 2, &p);   // NULL node: any node
 *   ...  gs_scheduler_confirm(s, "default/p1", 10);
 *   gs_placement_free(p); gs_pod_free(pod); gs_scheduler_destroy(s);
 *
 * Conventions
 *  - Errors: every call that can fail returns a gs_status*: NULL on success,
 *    else an error the caller owns and frees with gs_status_free(). Its code
 *    is one of gs_code (absl's canonical codes, same numbers) and its message
 *    names the bad value. A failed call changes nothing. No C++ exception
 *    crosses this boundary: an unexpected one becomes GS_INTERNAL.
 *  - Strings in are UTF-8, given as (pointer, length) where a length
 *    parameter follows, else NUL-terminated. They are copied: the caller may
 *    free them when the call returns. Strings out are NUL-terminated and owned
 *    by the object that returned them (freed with it) unless the function says
 *    the caller frees them with gs_string_free().
 *  - Ownership: gs_*_create / gs_*_from_* / gs_*_parse give the caller an
 *    object it frees with the matching gs_*_free / gs_*_destroy (NULL is
 *    accepted and ignored). Out-parameters are written only on success.
 *  - Structs in are versioned by their first field, `size`: set by the
 *    matching gs_*_init(), which also sets every default. A later ABI adds
 *    fields only at the end; a library reads only the fields `size` covers.
 *  - Thread safety: a gs_scheduler may be used from any number of threads at
 *    once (readers share a lock, writers take it exclusively; see
 *    gpushare/scheduler.h). gs_pod, gs_placement, gs_fit_results,
 *    gs_node_names and gs_scores objects are immutable once made: any thread may read them, one
 *    thread frees them. gs_status objects belong to the calling thread's code
 *    like any other value. Functions without a handle are thread-safe.
 *  - Symbols: only gs_* functions are exported (version nodes GPUSHARE_C_1,
 *    GPUSHARE_C_2 for the calls ABI 2 added and GPUSHARE_C_3 for those of
 *    ABI 3, of libgpushare_c.so); the C++ library inside is hidden.
 *  - ABI 2 added reservations that never expire (reservation_ttl_ms 0) and
 *    reservation tokens: gs_placement_token, gs_scheduler_confirm_reservation,
 *    gs_scheduler_forget_reservation; and gs_scheduler_fit_after, the fit of
 *    kube-scheduler's preemption and nominated pods.
 *  - ABI 3 added gs_scheduler_fit_all, every node's fit in one call, with
 *    gs_scheduler_node_names for the nodes' positions.
 *  - ABI 4 added the fragmentation-aware policies' target workload to
 *    gs_scheduler_options (target_workload, target_resource): fields, no
 *    new calls.
 */
#ifndef GPUSHARE_C_GPUSHARE_H_
#define GPUSHARE_C_GPUSHARE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GS_API __attribute__((visibility("default")))
#else
#define GS_API
#endif

/* The ABI this header describes. gs_abi_version() returns the library's:
 * a host built against ABI N runs with a library whose ABI is >= N. */
#define GS_ABI_VERSION 4

/* ---- Errors ---------------------------------------------------------------- */

typedef enum gs_code {
  GS_OK = 0,
  GS_CANCELLED = 1,
  GS_UNKNOWN = 2,
  GS_INVALID_ARGUMENT = 3,
  GS_DEADLINE_EXCEEDED = 4,
  GS_NOT_FOUND = 5,
  GS_ALREADY_EXISTS = 6,
  GS_PERMISSION_DENIED = 7,
  GS_RESOURCE_EXHAUSTED = 8,
  GS_FAILED_PRECONDITION = 9,
  GS_ABORTED = 10,
  GS_OUT_OF_RANGE = 11,
  GS_UNIMPLEMENTED = 12,
  GS_INTERNAL = 13,
  GS_UNAVAILABLE = 14,
  GS_DATA_LOSS = 15,
  GS_UNAUTHENTICATED = 16
} gs_code;

typedef struct gs_status gs_status;

GS_API gs_code gs_status_code(const gs_status* status);       /* GS_OK for NULL */
GS_API const char* gs_status_message(const gs_status* status); /* "" for NULL */
GS_API void gs_status_free(gs_status* status);
/* Frees a string this library returned for the caller to free. */
GS_API void gs_string_free(char* text);

/* ---- Version ----------------------------------------------------------------- */

GS_API uint32_t gs_abi_version(void);    /* GS_ABI_VERSION of the library */
GS_API const char* gs_version(void);     /* the library's version, "0.1.0" */
/* The placement policies by name, comma-separated ("binpack,spread,..."). */
GS_API const char* gs_policy_names(void);

/* ---- The scheduler ------------------------------------------------------------ */

typedef struct gs_scheduler gs_scheduler;

/* The resource of the default target workload (gs_scheduler_options). */
typedef enum gs_target_resource {
  GS_TARGET_COMPUTE = 0, /* GPU compute, thousandths of a GPU (the default) */
  GS_TARGET_MEMORY = 1   /* GPU memory units */
} gs_target_resource;

typedef struct gs_scheduler_options {
  size_t size;                 /* sizeof(gs_scheduler_options) */
  const char* policy;          /* "binpack" (default), "spread", "fgdpack", ... */
  int64_t reservation_ttl_ms;  /* >= 0; default 60000; 0: never expire (ABI 2) */
  uint64_t seed;               /* the "random" policy's seed; default 0 */
  /* ABI 4. The workload whose fragmentation the policies "fgd", "fgdcpu",
   * "fgdpack" and their "dra+" forms descend (the other policies ignore
   * it): JSON, NUL-terminated, in the form of `gpushare-extender
   * --target-workload FILE` (TargetWorkloadToJson() in
   * gpushare/fragmentation.h):
   *   {"resource": "memory", "tasks": [{"cpu": 4000, "gpu_share": 8,
   *     "gpu_count": 1, "weight": 0.42}, ...]}
   * NULL (default): one whole-GPU task on target_resource, so that only
   * partly used GPUs count as lost. */
  const char* target_workload;
  /* ABI 4. The default target's resource: GS_TARGET_COMPUTE (default) or
   * GS_TARGET_MEMORY, for requests of GPU memory only (aliyun.com/gpu-mem,
   * DRA memory claims), which never change the idle compute that a compute
   * target measures: against it every node that fits such a request scores
   * the same. With target_workload set, its "resource" decides and this
   * must be GS_TARGET_COMPUTE or name the same resource. */
  int32_t target_resource;
} gs_scheduler_options;

GS_API void gs_scheduler_options_init(gs_scheduler_options* options);

/* An empty cluster under `options` (NULL: the defaults). Errors:
 * GS_INVALID_ARGUMENT for an unknown policy (the message lists the known
 * ones), a TTL < 0, a target_workload that does not parse or holds a bad
 * value (the message names it: "options->target_workload: tasks[2].weight:
 * -1 is not a positive number"), or a target_resource that is neither
 * GS_TARGET_COMPUTE nor GS_TARGET_MEMORY or disagrees with the target
 * workload's resource. A library of ABI 4 reads the ABI 4 fields only when
 * `size` covers them: a host built against an older header gets the
 * defaults. A host that learns how every bind ends (a
 * kube-scheduler plugin: Unreserve, PostBind, the bound pod's event) sets
 * the TTL to 0, so that no slow bind can outlive its reservation and leave
 * its GPUs promised twice. */
GS_API gs_status* gs_scheduler_create(const gs_scheduler_options* options,
                                      gs_scheduler** out);
/* No call on `scheduler` may be running or follow. */
GS_API void gs_scheduler_destroy(gs_scheduler* scheduler);

/* ---- Nodes ----------------------------------------------------------------------- */

typedef struct gs_node {
  size_t size;                  /* sizeof(gs_node) */
  const char* name;             /* required, unique */
  int32_t gpu_count;            /* 0..64 */
  const int64_t* gpu_memory;    /* gpu_count sizes, memory units */
  const char* const* gpu_uuids; /* gpu_count UUIDs, or NULL */
  const char* gpu_model;        /* every GPU's model, or NULL */
  int64_t cpu;                  /* thousandths of a core; 0 = untracked */
  int64_t host_memory;          /* MiB; 0 = untracked */
  const char* const* labels;    /* label_count key/value pairs: k0,v0,k1,v1... */
  size_t label_count;
  int32_t gpu_sharing;          /* -1: by the labels (default); 0 no; 1 yes */
  int32_t schedulable;          /* 1 (default) or 0 */
} gs_node;

GS_API void gs_node_init(gs_node* node);

/* Errors: GS_INVALID_ARGUMENT naming the bad field; GS_ALREADY_EXISTS. */
GS_API gs_status* gs_scheduler_add_node(gs_scheduler* scheduler, const gs_node* node);
/* Errors: GS_NOT_FOUND; GS_FAILED_PRECONDITION while it holds placements. */
GS_API gs_status* gs_scheduler_remove_node(gs_scheduler* scheduler, const char* name,
                                           size_t name_len);
GS_API gs_status* gs_scheduler_set_node_schedulable(gs_scheduler* scheduler,
                                                    const char* name, size_t name_len,
                                                    int schedulable);
GS_API gs_status* gs_scheduler_set_gpu_healthy(gs_scheduler* scheduler, const char* name,
                                               size_t name_len, int gpu, int healthy);

/* ---- Kubernetes objects (the extender's rules, see gpushare/kubernetes.h) ------- */

/* What one event changed (Extender::SyncReport's counters). */
typedef struct gs_event_report {
  size_t size;                  /* sizeof(gs_event_report) */
  int32_t nodes_added, nodes_updated, nodes_removed;
  int32_t confirmed, released, restored;
  int32_t warnings;             /* how many; the text is logged by the host */
} gs_event_report;

/* A watch event on a v1.Node or a v1.Pod, as JSON (`type` "ADDED",
 * "MODIFIED" or "DELETED"): nodes are added, replaced once empty, cordoned
 * and removed; bound pods confirm, restore or release their placements by
 * their annotations, as gpushare-extender does. `report` may be NULL.
 * Errors: GS_INVALID_ARGUMENT for another type or a malformed object. */
GS_API gs_status* gs_scheduler_apply_node_event(gs_scheduler* scheduler, const char* type,
                                                const char* json, size_t json_len,
                                                gs_event_report* report);
GS_API gs_status* gs_scheduler_apply_pod_event(gs_scheduler* scheduler, const char* type,
                                               const char* json, size_t json_len,
                                               gs_event_report* report);

/* ---- Pods (requests) ------------------------------------------------------------- */

typedef struct gs_pod gs_pod;

typedef struct gs_request {
  size_t size;                  /* sizeof(gs_request) */
  const char* id;               /* required, e.g. "ns/name" */
  int64_t gpu_memory;           /* N memory units in all */
  int64_t gpu_count;            /* M GPUs sharing N; default 1 */
  int64_t compute;              /* per GPU, thousandths; 0 = untracked */
  int64_t whole_gpus;           /* exclusive whole GPUs */
  int64_t cpu;                  /* thousandths of a core */
  int64_t host_memory;          /* MiB */
  const char* const* gpu_models;/* allowed models, or NULL: any */
  size_t gpu_model_count;
} gs_request;

GS_API void gs_request_init(gs_request* request);

/* A request validated once, to be filtered, scored and reserved many times.
 * Errors: GS_INVALID_ARGUMENT naming the bad field. */
GS_API gs_status* gs_pod_from_request(const gs_request* request, gs_pod** out);
/* A v1.Pod as JSON (ParsePod's rules: aliyun.com/gpu-mem, gpu-count label,
 * nodeSelector, required node affinity, topology annotation). Errors:
 * GS_INVALID_ARGUMENT naming the bad value, also for a namespace or name
 * the API server could not have issued (they name the host's patch and
 * bind) and for a request that gs_pod_from_request() would refuse. */
GS_API gs_status* gs_pod_parse(const char* json, size_t json_len, gs_pod** out);
GS_API void gs_pod_free(gs_pod* pod);
GS_API const char* gs_pod_id(const gs_pod* pod);       /* "ns/name" */
/* 1 when the pod asks for GPU memory or whole GPUs (or, for a plain request,
 * GPU compute), else 0: a host may skip the scheduler for the others. */
GS_API int gs_pod_uses_gpus(const gs_pod* pod);

/* ---- Filter and score -------------------------------------------------------------- */

/* Whether `pod` fits `node` now: *feasible 1 or 0. When it does not and
 * `reason` is not NULL, *reason is why (the caller frees it with
 * gs_string_free()); else *reason is NULL. An unknown node does not fit
 * ("node 'x' is unknown to gpushare"). A pod of gs_pod_parse() is filtered
 * as gpushare-extender filters it: a known node that its required node
 * affinity excludes does not fit ("node(s) didn't match Pod's node
 * affinity/selector"), and a pod that asks for no GPUs fits every node
 * (kube-scheduler judges it). Shared lock. */
GS_API gs_status* gs_scheduler_fit(const gs_scheduler* scheduler, const gs_pod* pod,
                                   const char* node, size_t node_len, int* feasible,
                                   char** reason);

/* Node names in, as one buffer: `names` holds `count` names back to back,
 * name i being `lengths[i]` bytes (no separators, no NUL needed). A host
 * that keeps its names in managed memory fills one buffer per call. */
typedef struct gs_names {
  const char* names;
  const uint32_t* lengths;
  size_t count;
} gs_names;

/* gs_scheduler_fit() on `node` as it would be after edits, judged on a copy
 * of its state (nothing changes): the placements of the requests `removed`
 * names (request ids, "namespace/name" for pods of gs_pod_parse(); NULL:
 * none) freed, then the `added_count` pods of `added` placed there first,
 * in order, on the GPUs the policy chooses. kube-scheduler's preemption
 * removes its victims so; it adds the pods nominated to the node. Ids not
 * placed on the node are ignored, and so are added pods placed already
 * (counted where they are). An added pod that does not fit makes `pod` not
 * fit, the reason naming it: the GPUs a nominated pod waits for are not
 * offered to another. The pod's node affinity is judged as in
 * gs_scheduler_fit(). When `unresolvable` is not NULL, *unresolvable is 1
 * where the pod does not fit and would not on the node holding nothing
 * (its affinity, a GPU model, too few or too small GPUs, sharing off,
 * cordoned: no preemption can help), else 0; 0 for an unknown node, which
 * the host may not have applied yet. Without edits
 * (removed NULL or empty, added_count 0) it costs what gs_scheduler_fit()
 * does. Errors: GS_INVALID_ARGUMENT for an added pod that gs_scheduler_fit()
 * would refuse to judge. Shared lock. ABI 2. */
GS_API gs_status* gs_scheduler_fit_after(const gs_scheduler* scheduler, const gs_pod* pod,
                                         const char* node, size_t node_len,
                                         const gs_names* removed, const gs_pod* const* added,
                                         size_t added_count, int* feasible, int* unresolvable,
                                         char** reason);

/* gs_scheduler_fit() on every node at once, by the node's position (the
 * order nodes were added; gs_scheduler_node_names()): verdicts[i] is 1 when
 * the pod fits node i now, else 0. Served only for a pod whose fit depends
 * on the nodes' resources alone: no node selector, GPU model, required
 * topology or required node affinity. Then *served is 1, *count the number
 * of nodes, *generation the generation of the node order (any node added or
 * removed gives another), and min(capacity, *count) verdicts are written;
 * call again with room for *count when it exceeds capacity. Otherwise
 * *served, *count and *generation are 0 and the host asks
 * gs_scheduler_fit() node by node. A pod that asks for no GPUs fits
 * everywhere. The answers are kept per shape of request (the 64 shapes used
 * last), each node's judged again only once it changed: a burst of pods of a
 * few shapes costs about a comparison per node. A refusal's reason comes from
 * gs_scheduler_fit(). Shared lock. ABI 3. */
GS_API gs_status* gs_scheduler_fit_all(const gs_scheduler* scheduler, const gs_pod* pod,
                                       uint8_t* verdicts, size_t capacity, size_t* count,
                                       uint64_t* generation, int* served);

/* The nodes' names by position, as gs_scheduler_fit_all() numbers them, and
 * the generation of that order. Free with gs_node_names_free(). ABI 3. */
typedef struct gs_node_names gs_node_names;
GS_API gs_status* gs_scheduler_node_names(const gs_scheduler* scheduler, gs_node_names** out);
/* The names back to back in one buffer (name i is lengths[i] bytes, no
 * separators), their count and generation; valid until freed. */
GS_API void gs_node_names_data(const gs_node_names* names, const char** buffer,
                               const uint32_t** lengths, size_t* count, uint64_t* generation);
GS_API void gs_node_names_free(gs_node_names* names);

typedef struct gs_fit_results gs_fit_results;

/* Fit on each node of `nodes` (NULL: every node, in the cluster's order). */
GS_API gs_status* gs_scheduler_filter(const gs_scheduler* scheduler, const gs_pod* pod,
                                      const gs_names* nodes, gs_fit_results** out);
/* Accessors of result i < count (a node name, "" for a feasible node's
 * reason); NULL (0 for feasible) out of range. */
GS_API size_t gs_fit_results_count(const gs_fit_results* results);
GS_API const char* gs_fit_results_node(const gs_fit_results* results, size_t i);
GS_API int gs_fit_results_feasible(const gs_fit_results* results, size_t i);
GS_API const char* gs_fit_results_reason(const gs_fit_results* results, size_t i);
GS_API void gs_fit_results_free(gs_fit_results* results);

/* The policy's rank (0..10, 10 best, see Scheduler::Score) of each node of
 * `nodes` (not NULL), written to ranks[i] (`nodes->count` entries); -1 where
 * the pod does not fit (gs_scheduler_fit()) or the node is unknown. A pod of
 * gs_pod_parse() that asks for no GPUs ranks 0 everywhere, as with
 * gpushare-extender. Shared lock. */
GS_API gs_status* gs_scheduler_rank(const gs_scheduler* scheduler, const gs_pod* pod,
                                    const gs_names* nodes, int64_t* ranks);

/* ---- Placements -------------------------------------------------------------------- */

typedef struct gs_placement gs_placement;

/* Reserves GPUs for `pod` on `node` (NULL or empty: any node, by the policy)
 * for the TTL; errors as Scheduler::Reserve (GS_RESOURCE_EXHAUSTED says why
 * it does not fit, GS_ALREADY_EXISTS if placed elsewhere, GS_NOT_FOUND for
 * an unknown node). Reserving again on the same node returns the same
 * placement. `out` may be NULL.
 * A pod of gs_pod_parse() is reserved as gpushare-extender binds it (with no
 * binder: it only reserves), so that it owns the placement by its UID and
 * later gs_scheduler_apply_pod_event() calls confirm (bound to the node) or
 * release (deleted, completed) it; a placement that its name holds for
 * another UID (an older pod of that name) is released first. Its required
 * node affinity holds: a node it excludes does not fit, and with no node it
 * goes to the best-scored node it allows (ties: the node added last). */
GS_API gs_status* gs_scheduler_reserve(gs_scheduler* scheduler, const gs_pod* pod,
                                       const char* node, size_t node_len,
                                       gs_placement** out);
/* Places `pod` on any node, by the policy, with no TTL (a simulator, a
 * batch host): a pod of gs_pod_parse() is reserved as above, then confirmed.
 * GS_ALREADY_EXISTS if it is placed. */
GS_API gs_status* gs_scheduler_place(gs_scheduler* scheduler, const gs_pod* pod,
                                     gs_placement** out);
/* Reservation lifecycle by request id; errors as the Scheduler's. */
GS_API gs_status* gs_scheduler_confirm(gs_scheduler* scheduler, const char* id, size_t id_len);
GS_API gs_status* gs_scheduler_forget(gs_scheduler* scheduler, const char* id, size_t id_len);
/* As gs_scheduler_confirm() and gs_scheduler_forget(), for one reservation:
 * the one whose token (gs_placement_token() of the reservation's placement)
 * is `token`. GS_FAILED_PRECONDITION, changing nothing, when `id` is
 * reserved under another token: a newer attempt, or another pod of the same
 * name, which a late call must not confirm or free. Confirming an id that
 * is confirmed already is OK. (ABI 2) */
GS_API gs_status* gs_scheduler_confirm_reservation(gs_scheduler* scheduler, const char* id,
                                                   size_t id_len, uint64_t token);
GS_API gs_status* gs_scheduler_forget_reservation(gs_scheduler* scheduler, const char* id,
                                                  size_t id_len, uint64_t token);
GS_API gs_status* gs_scheduler_release(gs_scheduler* scheduler, const char* id, size_t id_len);
/* Forgets reservations past their TTL; returns how many (0 for NULL). */
GS_API int gs_scheduler_expire(gs_scheduler* scheduler);
/* The placement held (reserved or confirmed) for `id`: GS_NOT_FOUND if none. */
GS_API gs_status* gs_scheduler_placement(const gs_scheduler* scheduler, const char* id,
                                         size_t id_len, gs_placement** out);

/* Accessors; gs_placement_gpu() is -1 for i out of range. */
GS_API const char* gs_placement_request_id(const gs_placement* placement);
GS_API const char* gs_placement_node(const gs_placement* placement);
GS_API size_t gs_placement_gpu_count(const gs_placement* placement);
GS_API int gs_placement_gpu(const gs_placement* placement, size_t i); /* ascending */
GS_API int64_t gs_placement_memory_per_gpu(const gs_placement* placement);
GS_API int64_t gs_placement_compute_per_gpu(const gs_placement* placement);
GS_API int gs_placement_exclusive(const gs_placement* placement);
/* The token of the reservation gs_scheduler_reserve() made or found; 0 for
 * a confirmed placement, one of another call, or NULL. (ABI 2) */
GS_API uint64_t gs_placement_token(const gs_placement* placement);
/* The pod annotations of the bind (ALIYUN_COM_GPU_MEM_IDX, ..._POD, ..._DEV,
 * ..._ASSIGNED, ..._ASSUME_TIME, scheduler.framework.gpushare.allocation)
 * as a JSON merge patch {"metadata":{"annotations":{...}}}: what
 * gpushare-extender writes, so the device plugin reads it unchanged. */
GS_API const char* gs_placement_patch(const gs_placement* placement);
GS_API void gs_placement_free(gs_placement* placement);

/* ---- Snapshot ------------------------------------------------------------------------- */

/* The whole state (Cluster::ToJson(): nodes, health, placements) as JSON;
 * the caller frees *json with gs_string_free(). Shared lock. */
GS_API gs_status* gs_scheduler_snapshot(const gs_scheduler* scheduler, char** json);
/* Cluster::CheckInvariants() and the reservations; GS_INTERNAL if broken. */
GS_API gs_status* gs_scheduler_check(const gs_scheduler* scheduler);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* GPUSHARE_C_GPUSHARE_H_ */
