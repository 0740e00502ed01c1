/* The C ABI (gpushare/c/gpushare.h) from C11, as a cgo or FFI host uses it:
 * errors and their codes, nodes, fit and filter, rank, the reservation
 * lifecycle, Kubernetes pods and watch events, multi-card and exclusive
 * requests, NULL arguments, snapshots, and four threads at once.
 *
 * Each CHECK prints the failing expression (and the last status message) and
 * exits non-zero; the program exits 0 when every check holds. Everything it
 * makes is freed, so LeakSanitizer checks the library's ownership rules too. */

#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpushare/c/gpushare.h"

static int checks = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    ++checks;                                                                  \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* The call must succeed. */
#define OK(call) ok_at((call), #call, __FILE__, __LINE__)
/* The call must fail with `code` and a message containing `text`. */
#define FAILS(call, code, text) fails_at((call), (code), (text), #call, __FILE__, __LINE__)

static void ok_at(gs_status* st, const char* expr, const char* file, int line) {
  ++checks;
  if (st != NULL) {
    fprintf(stderr, "%s:%d: %s failed: code %d: %s\n", file, line, expr,
            (int)gs_status_code(st), gs_status_message(st));
    gs_status_free(st);
    exit(1);
  }
}

static void fails_at(gs_status* st, gs_code code, const char* text, const char* expr,
                     const char* file, int line) {
  ++checks;
  if (st == NULL) {
    fprintf(stderr, "%s:%d: %s succeeded; expected code %d\n", file, line, expr, (int)code);
    exit(1);
  }
  if (gs_status_code(st) != code || strstr(gs_status_message(st), text) == NULL) {
    fprintf(stderr, "%s:%d: %s: expected code %d with \"%s\", got code %d: %s\n", file, line,
            expr, (int)code, text, (int)gs_status_code(st), gs_status_message(st));
    gs_status_free(st);
    exit(1);
  }
  gs_status_free(st);
}

static int contains(const char* text, const char* part) {
  return text != NULL && strstr(text, part) != NULL;
}

/* ---- Small vocabulary ------------------------------------------------------ */

static gs_scheduler* new_scheduler(const char* policy) {
  gs_scheduler_options o;
  gs_scheduler_options_init(&o);
  o.policy = policy;
  gs_scheduler* s = NULL;
  OK(gs_scheduler_create(&o, &s));
  CHECK(s != NULL);
  return s;
}

/* A node of `gpus` GPUs of `memory` units each that takes shared work. */
static gs_status* add_node(gs_scheduler* s, const char* name, int32_t gpus, int64_t memory) {
  int64_t sizes[64];
  for (int32_t i = 0; i < gpus && i < 64; ++i) sizes[i] = memory;
  gs_node n;
  gs_node_init(&n);
  n.name = name;
  n.gpu_count = gpus;
  n.gpu_memory = sizes;
  n.gpu_model = "T4";
  n.gpu_sharing = 1;
  return gs_scheduler_add_node(s, &n);
}

static gs_pod* shared_pod(const char* id, int64_t memory, int64_t count) {
  gs_request r;
  gs_request_init(&r);
  r.id = id;
  r.gpu_memory = memory;
  r.gpu_count = count;
  gs_pod* pod = NULL;
  OK(gs_pod_from_request(&r, &pod));
  CHECK(pod != NULL);
  return pod;
}

/* Names back to back in `buf`, lengths in `lengths`. */
static gs_names names_of(const char* const* list, size_t count, char* buf, uint32_t* lengths) {
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    size_t len = strlen(list[i]);
    memcpy(buf + at, list[i], len);
    lengths[i] = (uint32_t)len;
    at += len;
  }
  gs_names names;
  names.names = buf;
  names.lengths = lengths;
  names.count = count;
  return names;
}

static char* snapshot(const gs_scheduler* s) {
  char* json = NULL;
  OK(gs_scheduler_snapshot(s, &json));
  CHECK(json != NULL);
  return json;
}

#define ID(text) (text), strlen(text)

/* ---- Sections ------------------------------------------------------------------ */

static void test_version(void) {
  CHECK(gs_abi_version() == GS_ABI_VERSION);
  CHECK(strcmp(gs_version(), "0.1.0") == 0);
  CHECK(contains(gs_policy_names(), "binpack"));
  CHECK(contains(gs_policy_names(), "spread,") || contains(gs_policy_names(), ",spread"));
}

static void test_create(void) {
  gs_scheduler* s = NULL;
  gs_scheduler_options o;
  gs_scheduler_options_init(&o);
  CHECK(o.size == sizeof(o));
  CHECK(strcmp(o.policy, "binpack") == 0);
  CHECK(o.reservation_ttl_ms == 60000);

  o.policy = "no-such-policy";
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "no-such-policy");
  /* The message lists the known ones. */
  gs_status* st = gs_scheduler_create(&o, &s);
  CHECK(contains(gs_status_message(st), "binpack"));
  gs_status_free(st);
  CHECK(s == NULL); /* Written only on success. */

  gs_scheduler_options_init(&o);
  o.reservation_ttl_ms = -1;
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "ttl");
  gs_scheduler_options_init(&o);
  o.size = sizeof(size_t);
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "options->size");
  FAILS(gs_scheduler_create(NULL, NULL), GS_INVALID_ARGUMENT, "out is NULL");
  CHECK(s == NULL);

  OK(gs_scheduler_create(NULL, &s)); /* The defaults. */
  CHECK(s != NULL);
  gs_scheduler_destroy(s);
}

/* ABI 4: the target workload of the fragmentation-aware policies. Node
 * "full" holds 30 of GPU 0's 40 units, node "empty" nothing; an 8-unit pod
 * goes, under dra+fgdpack, to the first GPU with room: GPU 0 on either.
 * Against the default compute target every node ranks the same (memory
 * requests leave compute idle); against one whole GPU on memory, "full"
 * ranks first (GPU 0 was partly used already: its lost units drop from 10 to
 * 2, where "empty" would lose 32); against 10-unit tasks, "empty" does (on
 * "full" the 10 units that fit one are cut to 2). */
static void rank_full_empty(const gs_scheduler_options* o, int64_t ranks[2]) {
  gs_scheduler* s = NULL;
  OK(gs_scheduler_create(o, &s));
  OK(add_node(s, "full", 2, 40));
  OK(add_node(s, "empty", 2, 40));
  gs_pod* held = shared_pod("default/held", 30, 1);
  gs_placement* p = NULL;
  OK(gs_scheduler_reserve(s, held, ID("full"), &p));
  CHECK(gs_placement_gpu(p, 0) == 0);
  OK(gs_scheduler_confirm(s, ID("default/held")));
  gs_placement_free(p);
  gs_pod* pod = shared_pod("default/new", 8, 1);
  const char* list[2] = {"full", "empty"};
  char buf[16];
  uint32_t lengths[2];
  gs_names names = names_of(list, 2, buf, lengths);
  OK(gs_scheduler_rank(s, pod, &names, ranks));
  gs_pod_free(pod);
  gs_pod_free(held);
  gs_scheduler_destroy(s);
}

static void test_target_workload(void) {
  gs_scheduler_options o;
  gs_scheduler_options_init(&o);
  CHECK(o.target_workload == NULL);
  CHECK(o.target_resource == GS_TARGET_COMPUTE);
  o.policy = "dra+fgdpack";
  int64_t ranks[2];

  rank_full_empty(&o, ranks); /* The default: one whole GPU of compute. */
  CHECK(ranks[0] >= 0 && ranks[0] == ranks[1]);
  o.target_resource = GS_TARGET_MEMORY;
  rank_full_empty(&o, ranks);
  CHECK(ranks[0] > ranks[1]);
  o.target_resource = GS_TARGET_COMPUTE;
  o.target_workload = "{\"resource\": \"memory\", \"tasks\": [{\"gpu_count\": 1, \"weight\": 1}]}";
  rank_full_empty(&o, ranks); /* The same, as JSON. */
  CHECK(ranks[0] > ranks[1]);
  o.target_resource = GS_TARGET_MEMORY; /* Agrees with the JSON. */
  rank_full_empty(&o, ranks);
  CHECK(ranks[0] > ranks[1]);
  o.target_workload =
      "{\"resource\": \"memory\", \"tasks\": [{\"gpu_share\": 10, \"gpu_count\": 1, \"weight\": 1}]}";
  rank_full_empty(&o, ranks);
  CHECK(ranks[1] > ranks[0]);
  /* binpack ignores the target: "full" packs tighter either way. */
  o.policy = "dra+binpack";
  rank_full_empty(&o, ranks);
  CHECK(ranks[0] > ranks[1]);

  /* Bad values, named. */
  gs_scheduler* s = NULL;
  gs_scheduler_options_init(&o);
  o.policy = "fgdpack";
  o.target_workload = "{\"resource\": \"memory\", \"tasks\": [{\"gpu_share\": 8, \"weight\": 1}";
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "options->target_workload: ");
  o.target_workload = "{\"resource\": \"memory\", \"tasks\": [{\"gpu_share\": 8, "
                      "\"gpu_count\": 1, \"weight\": -1}]}";
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT,
        "options->target_workload: tasks[0].weight: -1 is not a positive number");
  o.target_workload = "{\"resource\": \"disk\", \"tasks\": [{\"weight\": 1}]}";
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "disk");
  o.target_workload = "{\"resource\": \"compute\", \"tasks\": [{\"gpu_share\": 500, "
                      "\"gpu_count\": 1, \"weight\": 1}]}";
  o.target_resource = GS_TARGET_MEMORY;
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "options->target_resource");
  o.target_resource = GS_TARGET_COMPUTE;
  OK(gs_scheduler_create(&o, &s));
  gs_scheduler_destroy(s);
  s = NULL;
  o.target_workload = NULL;
  o.target_resource = 7;
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "options->target_resource 7");
  /* Every policy checks the target, as MakePolicy() does. */
  o.policy = "binpack";
  FAILS(gs_scheduler_create(&o, &s), GS_INVALID_ARGUMENT, "options->target_resource 7");
  CHECK(s == NULL);

  /* A host built against ABI 3 passes a struct that ends before the ABI 4
   * fields: whatever lies there is not read. */
  o.target_workload = "not JSON";
  o.size = offsetof(gs_scheduler_options, target_workload);
  OK(gs_scheduler_create(&o, &s));
  gs_scheduler_destroy(s);
}

static void test_nodes(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n1", 2, 16));
  OK(add_node(s, "n2", 4, 8));
  FAILS(add_node(s, "n1", 1, 8), GS_ALREADY_EXISTS, "n1");

  char* before = snapshot(s);
  int64_t mem[2] = {16, 0};
  const char* uuids[2] = {"GPU-a", "GPU-a"};
  const char* labels[4] = {"zone", "a", "gpushare", NULL};
  gs_node n;

  gs_node_init(&n);
  n.name = "bad";
  n.gpu_count = 65;
  n.gpu_memory = mem;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "gpu_count 65");
  n.gpu_count = 2;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "GPU 1 memory 0");
  mem[1] = 16;
  n.gpu_uuids = uuids;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "same UUID");
  n.gpu_uuids = NULL;
  n.gpu_memory = NULL;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "gpu_memory is NULL");
  n.gpu_memory = mem;
  n.labels = labels;
  n.label_count = 2;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "labels[3] is NULL");
  n.labels = NULL;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "labels is NULL");
  n.label_count = 0;
  n.gpu_sharing = 2;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "gpu_sharing 2");
  n.gpu_sharing = -1;
  n.name = NULL;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "node->name is NULL");
  n.name = "";
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "node name is empty");
  n.name = "bad";
  n.size = 8;
  FAILS(gs_scheduler_add_node(s, &n), GS_INVALID_ARGUMENT, "node->size is 8");
  /* Nothing changed. */
  char* after = snapshot(s);
  CHECK(strcmp(before, after) == 0);
  gs_string_free(after);
  gs_string_free(before);

  /* Cordon, health, removal. */
  OK(gs_scheduler_set_node_schedulable(s, ID("n2"), 0));
  gs_pod* pod = shared_pod("default/p", 4, 1);
  int feasible = -1;
  char* reason = NULL;
  OK(gs_scheduler_fit(s, pod, ID("n2"), &feasible, &reason));
  CHECK(feasible == 0);
  CHECK(contains(reason, "unschedulable"));
  gs_string_free(reason);
  OK(gs_scheduler_set_node_schedulable(s, ID("n2"), 1));
  OK(gs_scheduler_set_gpu_healthy(s, ID("n1"), 0, 0));
  OK(gs_scheduler_set_gpu_healthy(s, ID("n1"), 1, 0));
  OK(gs_scheduler_fit(s, pod, ID("n1"), &feasible, &reason));
  CHECK(feasible == 0);
  CHECK(contains(reason, "no healthy GPU"));
  gs_string_free(reason);
  FAILS(gs_scheduler_set_gpu_healthy(s, ID("n1"), 7, 1), GS_INVALID_ARGUMENT, "7");
  FAILS(gs_scheduler_set_gpu_healthy(s, ID("zz"), 0, 1), GS_NOT_FOUND, "zz");
  OK(gs_scheduler_set_gpu_healthy(s, ID("n1"), 0, 1));
  OK(gs_scheduler_set_gpu_healthy(s, ID("n1"), 1, 1));

  OK(gs_scheduler_reserve(s, pod, ID("n2"), NULL));
  FAILS(gs_scheduler_remove_node(s, ID("n2")), GS_FAILED_PRECONDITION, "n2");
  OK(gs_scheduler_release(s, ID("default/p")));
  OK(gs_scheduler_remove_node(s, ID("n2")));
  FAILS(gs_scheduler_remove_node(s, ID("n2")), GS_NOT_FOUND, "n2");
  gs_pod_free(pod);
  OK(gs_scheduler_check(s));
  gs_scheduler_destroy(s);
}

static void test_fit_filter_rank(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n1", 2, 16));
  OK(add_node(s, "n2", 4, 8));
  gs_pod* big = shared_pod("default/big", 12, 1);
  gs_pod* small = shared_pod("default/small", 2, 1);
  CHECK(strcmp(gs_pod_id(big), "default/big") == 0);
  CHECK(gs_pod_uses_gpus(big) == 1);

  int feasible = -1;
  char* reason = (char*)"unset";
  OK(gs_scheduler_fit(s, big, ID("n1"), &feasible, &reason));
  CHECK(feasible == 1);
  CHECK(reason == NULL);
  OK(gs_scheduler_fit(s, big, ID("n2"), &feasible, &reason));
  CHECK(feasible == 0);
  CHECK(contains(reason, "insufficient GPU memory on any single GPU"));
  gs_string_free(reason);
  OK(gs_scheduler_fit(s, big, ID("zz"), &feasible, &reason));
  CHECK(feasible == 0);
  CHECK(contains(reason, "node 'zz' is unknown to gpushare"));
  gs_string_free(reason);
  OK(gs_scheduler_fit(s, big, ID("n2"), &feasible, NULL)); /* No reason wanted. */
  CHECK(feasible == 0);

  /* Filter over one buffer of names, in the order given. */
  const char* list[3] = {"n2", "zz", "n1"};
  char buf[16];
  uint32_t lengths[3];
  gs_names names = names_of(list, 3, buf, lengths);
  gs_fit_results* fits = NULL;
  OK(gs_scheduler_filter(s, big, &names, &fits));
  CHECK(gs_fit_results_count(fits) == 3);
  CHECK(strcmp(gs_fit_results_node(fits, 0), "n2") == 0);
  CHECK(gs_fit_results_feasible(fits, 0) == 0);
  CHECK(contains(gs_fit_results_reason(fits, 0), "insufficient GPU memory"));
  CHECK(strcmp(gs_fit_results_node(fits, 1), "zz") == 0);
  CHECK(gs_fit_results_feasible(fits, 1) == 0);
  CHECK(contains(gs_fit_results_reason(fits, 1), "unknown to gpushare"));
  CHECK(strcmp(gs_fit_results_node(fits, 2), "n1") == 0);
  CHECK(gs_fit_results_feasible(fits, 2) == 1);
  CHECK(strcmp(gs_fit_results_reason(fits, 2), "") == 0);
  CHECK(gs_fit_results_node(fits, 3) == NULL); /* Out of range. */
  CHECK(gs_fit_results_reason(fits, 3) == NULL);
  CHECK(gs_fit_results_feasible(fits, 3) == 0);
  gs_fit_results_free(fits);

  /* NULL: every node, in the cluster's order. */
  OK(gs_scheduler_filter(s, small, NULL, &fits));
  CHECK(gs_fit_results_count(fits) == 2);
  CHECK(strcmp(gs_fit_results_node(fits, 0), "n1") == 0);
  CHECK(strcmp(gs_fit_results_node(fits, 1), "n2") == 0);
  CHECK(gs_fit_results_feasible(fits, 0) == 1 && gs_fit_results_feasible(fits, 1) == 1);
  gs_fit_results_free(fits);

  /* No names: no results. */
  gs_names none = {NULL, NULL, 0};
  OK(gs_scheduler_filter(s, small, &none, &fits));
  CHECK(gs_fit_results_count(fits) == 0);
  gs_fit_results_free(fits);
  gs_names broken = {buf, NULL, 2};
  FAILS(gs_scheduler_filter(s, small, &broken, &fits), GS_INVALID_ARGUMENT, "nodes->lengths");

  /* Rank: binpack prefers the fuller node; -1 where it does not fit. */
  OK(gs_scheduler_reserve(s, small, ID("n2"), NULL));
  int64_t ranks[3] = {99, 99, 99};
  gs_pod* other = shared_pod("default/other", 2, 1);
  OK(gs_scheduler_rank(s, other, &names, ranks));
  CHECK(ranks[0] >= 0 && ranks[0] <= 10);
  CHECK(ranks[1] == -1);
  CHECK(ranks[2] >= 0 && ranks[2] <= 10);
  CHECK(ranks[0] == 10); /* n2 holds 2 of 8 on a GPU: the tightest fit. */
  CHECK(ranks[2] < ranks[0]);
  OK(gs_scheduler_rank(s, big, &names, ranks));
  CHECK(ranks[0] == -1 && ranks[1] == -1 && ranks[2] == 10);
  FAILS(gs_scheduler_rank(s, big, NULL, ranks), GS_INVALID_ARGUMENT, "nodes is NULL");
  FAILS(gs_scheduler_rank(s, big, &names, NULL), GS_INVALID_ARGUMENT, "ranks is NULL");

  gs_pod_free(other);
  gs_pod_free(small);
  gs_pod_free(big);
  gs_scheduler_destroy(s);
}

static void test_requests(void) {
  gs_request r;
  gs_pod* pod = NULL;
  gs_request_init(&r);
  CHECK(r.size == sizeof(r) && r.gpu_count == 1);
  FAILS(gs_pod_from_request(&r, &pod), GS_INVALID_ARGUMENT, "request->id is NULL");
  r.id = "";
  FAILS(gs_pod_from_request(&r, &pod), GS_INVALID_ARGUMENT, "request id is empty");
  r.id = "default/x";
  r.gpu_memory = 9;
  r.gpu_count = 2;
  FAILS(gs_pod_from_request(&r, &pod), GS_INVALID_ARGUMENT, "not divisible by gpu count");
  r.gpu_count = 1;
  r.gpu_model_count = 1;
  FAILS(gs_pod_from_request(&r, &pod), GS_INVALID_ARGUMENT, "gpu_models is NULL");
  r.size = 4;
  FAILS(gs_pod_from_request(&r, &pod), GS_INVALID_ARGUMENT, "request->size is 4");
  CHECK(pod == NULL);

  gs_request_init(&r);
  r.id = "default/cpu";
  r.cpu = 500;
  OK(gs_pod_from_request(&r, &pod));
  CHECK(gs_pod_uses_gpus(pod) == 0);
  gs_pod_free(pod);

  /* GPU models are copied: the caller's array may go. */
  const char* models[1] = {"V100"};
  gs_request_init(&r);
  r.id = "default/v100";
  r.gpu_memory = 2;
  r.gpu_models = models;
  r.gpu_model_count = 1;
  OK(gs_pod_from_request(&r, &pod));
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n1", 1, 16)); /* T4 */
  int feasible = -1;
  char* reason = NULL;
  OK(gs_scheduler_fit(s, pod, ID("n1"), &feasible, &reason));
  CHECK(feasible == 0);
  CHECK(contains(reason, "GPU model"));
  gs_string_free(reason);
  gs_pod_free(pod);
  gs_scheduler_destroy(s);
}

static void test_lifecycle(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n1", 2, 16));
  OK(add_node(s, "n2", 2, 16));
  gs_pod* p1 = shared_pod("default/p1", 4, 1);

  gs_placement* a = NULL;
  OK(gs_scheduler_reserve(s, p1, ID("n1"), &a));
  CHECK(strcmp(gs_placement_request_id(a), "default/p1") == 0);
  CHECK(strcmp(gs_placement_node(a), "n1") == 0);
  CHECK(gs_placement_gpu_count(a) == 1);
  CHECK(gs_placement_memory_per_gpu(a) == 4);
  CHECK(gs_placement_compute_per_gpu(a) == 0);
  CHECK(gs_placement_exclusive(a) == 0);
  CHECK(gs_placement_gpu(a, 1) == -1);
  CHECK(contains(gs_placement_patch(a), "{\"metadata\":{\"annotations\":{"));
  CHECK(contains(gs_placement_patch(a), "\"ALIYUN_COM_GPU_MEM_POD\":\"4\""));

  /* Reserving again on the same node returns the same placement. */
  gs_placement* again = NULL;
  OK(gs_scheduler_reserve(s, p1, ID("n1"), &again));
  CHECK(strcmp(gs_placement_node(again), "n1") == 0);
  CHECK(gs_placement_gpu(again, 0) == gs_placement_gpu(a, 0));
  gs_placement_free(again);
  /* Elsewhere, or anywhere, it is placed already. */
  FAILS(gs_scheduler_reserve(s, p1, ID("n2"), NULL), GS_ALREADY_EXISTS, "already placed");
  FAILS(gs_scheduler_reserve(s, p1, NULL, 0, NULL), GS_ALREADY_EXISTS, "already placed");
  FAILS(gs_scheduler_reserve(s, p1, ID("zz"), NULL), GS_ALREADY_EXISTS, "already placed");

  /* The held placement, with its patch. */
  gs_placement* held = NULL;
  OK(gs_scheduler_placement(s, ID("default/p1"), &held));
  CHECK(strcmp(gs_placement_node(held), "n1") == 0);
  CHECK(gs_placement_gpu(held, 0) == gs_placement_gpu(a, 0));
  CHECK(contains(gs_placement_patch(held), "ALIYUN_COM_GPU_MEM_IDX"));
  gs_placement_free(held);

  OK(gs_scheduler_confirm(s, ID("default/p1")));
  OK(gs_scheduler_confirm(s, ID("default/p1"))); /* Confirming twice is OK. */
  FAILS(gs_scheduler_forget(s, ID("default/p1")), GS_FAILED_PRECONDITION, "release it instead");
  OK(gs_scheduler_release(s, ID("default/p1")));
  FAILS(gs_scheduler_release(s, ID("default/p1")), GS_FAILED_PRECONDITION, "default/p1");
  FAILS(gs_scheduler_placement(s, ID("default/p1"), &held), GS_NOT_FOUND, "default/p1");
  FAILS(gs_scheduler_confirm(s, ID("default/nobody")), GS_NOT_FOUND, "default/nobody");
  FAILS(gs_scheduler_forget(s, ID("default/nobody")), GS_NOT_FOUND, "default/nobody");
  FAILS(gs_scheduler_release(s, ID("default/nobody")), GS_NOT_FOUND, "default/nobody");

  /* Reserve on any node, then forget: a late confirm is refused. */
  gs_placement* any = NULL;
  OK(gs_scheduler_reserve(s, p1, NULL, 0, &any));
  CHECK(strcmp(gs_placement_node(any), "n1") == 0 || strcmp(gs_placement_node(any), "n2") == 0);
  gs_placement_free(any);
  FAILS(gs_scheduler_reserve(s, p1, "", 0, NULL), GS_ALREADY_EXISTS, "already placed");
  OK(gs_scheduler_forget(s, ID("default/p1")));
  FAILS(gs_scheduler_confirm(s, ID("default/p1")), GS_FAILED_PRECONDITION,
        "expired or was forgotten");
  CHECK(gs_scheduler_expire(s) == 0);

  /* Unknown node. */
  FAILS(gs_scheduler_reserve(s, p1, ID("zz"), NULL), GS_NOT_FOUND, "zz");

  /* Place: no TTL; placed already is AlreadyExists. */
  gs_placement* placed = NULL;
  OK(gs_scheduler_place(s, p1, &placed));
  CHECK(gs_placement_gpu_count(placed) == 1);
  CHECK(contains(gs_placement_patch(placed), "ALIYUN_COM_GPU_MEM_IDX"));
  gs_placement_free(placed);
  FAILS(gs_scheduler_place(s, p1, NULL), GS_ALREADY_EXISTS, "default/p1");
  FAILS(gs_scheduler_forget(s, ID("default/p1")), GS_FAILED_PRECONDITION, "release it instead");
  OK(gs_scheduler_release(s, ID("default/p1")));

  gs_placement_free(a);
  gs_pod_free(p1);
  OK(gs_scheduler_check(s));
  gs_scheduler_destroy(s);
}

static void test_ttl(void) {
  gs_scheduler_options o;
  gs_scheduler_options_init(&o);
  o.reservation_ttl_ms = 1;
  gs_scheduler* s = NULL;
  OK(gs_scheduler_create(&o, &s));
  OK(add_node(s, "n1", 1, 16));
  gs_pod* pod = shared_pod("default/brief", 4, 1);
  OK(gs_scheduler_reserve(s, pod, ID("n1"), NULL));
  struct timespec wait = {0, 20 * 1000 * 1000};
  nanosleep(&wait, NULL);
  CHECK(gs_scheduler_expire(s) == 1);
  FAILS(gs_scheduler_confirm(s, ID("default/brief")), GS_FAILED_PRECONDITION, "expired");
  gs_pod_free(pod);
  gs_scheduler_destroy(s);
}

/* ABI 2: no TTL, and tokens that keep a late call off a newer reservation. */
static void test_reservation_tokens(void) {
  gs_scheduler_options o;
  gs_scheduler_options_init(&o);
  o.reservation_ttl_ms = 0;
  gs_scheduler* s = NULL;
  OK(gs_scheduler_create(&o, &s));
  OK(add_node(s, "n1", 1, 16));
  gs_pod* pod = shared_pod("default/slow", 10, 1);
  gs_placement* first = NULL;
  OK(gs_scheduler_reserve(s, pod, ID("n1"), &first));
  const uint64_t t1 = gs_placement_token(first);
  CHECK(t1 > 0);
  struct timespec wait = {0, 20 * 1000 * 1000};
  nanosleep(&wait, NULL);
  CHECK(gs_scheduler_expire(s) == 0); /* Never expires. */
  gs_pod* other = shared_pod("default/other", 10, 1);
  FAILS(gs_scheduler_reserve(s, other, ID("n1"), NULL), GS_RESOURCE_EXHAUSTED, "n1");
  FAILS(gs_scheduler_forget_reservation(s, ID("default/slow"), 0), GS_INVALID_ARGUMENT, "token 0");
  OK(gs_scheduler_forget_reservation(s, ID("default/slow"), t1));
  gs_placement* second = NULL;
  OK(gs_scheduler_reserve(s, pod, ID("n1"), &second));
  const uint64_t t2 = gs_placement_token(second);
  CHECK(t2 > 0 && t2 != t1);
  FAILS(gs_scheduler_forget_reservation(s, ID("default/slow"), t1), GS_FAILED_PRECONDITION,
        "reserved again");
  FAILS(gs_scheduler_confirm_reservation(s, ID("default/slow"), t1), GS_FAILED_PRECONDITION,
        "reserved again");
  OK(gs_scheduler_confirm_reservation(s, ID("default/slow"), t2));
  OK(gs_scheduler_confirm_reservation(s, ID("default/slow"), t2));
  CHECK(gs_placement_token(NULL) == 0);
  OK(gs_scheduler_check(s));
  gs_placement_free(first);
  gs_placement_free(second);
  gs_pod_free(other);
  gs_pod_free(pod);
  gs_scheduler_destroy(s);
}

/* ABI 2: the fit of preemption's dry runs (victims removed) and of nominated
 * pods (added first), on a copy. */
static void test_fit_after(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n1", 2, 32));
  gs_pod* v1 = shared_pod("default/v1", 20, 1);
  gs_pod* v2 = shared_pod("default/v2", 10, 1);
  gs_pod* w = shared_pod("default/w", 30, 1);
  gs_pod* big = shared_pod("default/big", 28, 1);
  gs_pod* small = shared_pod("default/small", 2, 1);
  OK(gs_scheduler_place(s, v1, NULL));
  OK(gs_scheduler_place(s, v2, NULL));
  OK(gs_scheduler_place(s, w, NULL));
  char* before = snapshot(s);
  int feasible = -1, never = -1;
  char* why = NULL;
  OK(gs_scheduler_fit_after(s, big, ID("n1"), NULL, NULL, 0, &feasible, &never, &why));
  CHECK(feasible == 0 && never == 0 && contains(why, "largest free 2"));
  gs_string_free(why);
  const char* victims[] = {"default/v1", "default/v2"};
  char buf[64];
  uint32_t lengths[2];
  gs_names removed = names_of(victims, 2, buf, lengths);
  OK(gs_scheduler_fit_after(s, big, ID("n1"), &removed, NULL, 0, &feasible, NULL, &why));
  CHECK(feasible == 1 && why == NULL);
  /* big nominated, the victims still there: small does not get the node. */
  const gs_pod* nominated[] = {big};
  OK(gs_scheduler_fit_after(s, small, ID("n1"), NULL, nominated, 1, &feasible, NULL, &why));
  CHECK(feasible == 0 && contains(why, "'default/big', nominated to it"));
  gs_string_free(why);
  OK(gs_scheduler_fit_after(s, small, ID("n1"), &removed, nominated, 1, &feasible, NULL, NULL));
  CHECK(feasible == 1);
  FAILS(gs_scheduler_fit_after(s, small, ID("n1"), NULL, NULL, 1, &feasible, NULL, NULL),
        GS_INVALID_ARGUMENT, "added is NULL but added_count is 1");
  const gs_pod* holes[] = {big, NULL};
  FAILS(gs_scheduler_fit_after(s, small, ID("n1"), NULL, holes, 2, &feasible, NULL, NULL),
        GS_INVALID_ARGUMENT, "added[1] is NULL");
  FAILS(gs_scheduler_fit_after(s, NULL, ID("n1"), NULL, NULL, 0, &feasible, NULL, NULL),
        GS_INVALID_ARGUMENT, "pod");
  /* No GPU of n1 has 40 units: no preemption can help. */
  gs_pod* huge = shared_pod("default/huge", 40, 1);
  OK(gs_scheduler_fit_after(s, huge, ID("n1"), NULL, NULL, 0, &feasible, &never, NULL));
  CHECK(feasible == 0 && never == 1);
  OK(gs_scheduler_fit_after(s, huge, ID("nope"), NULL, NULL, 0, &feasible, &never, NULL));
  CHECK(feasible == 0 && never == 0); /* Unknown: maybe not applied yet. */
  gs_pod_free(huge);
  char* after = snapshot(s);
  CHECK(strcmp(before, after) == 0);
  gs_string_free(before);
  gs_string_free(after);
  OK(gs_scheduler_check(s));
  gs_pod_free(v1);
  gs_pod_free(v2);
  gs_pod_free(w);
  gs_pod_free(big);
  gs_pod_free(small);
  gs_scheduler_destroy(s);
}

/* ABI 3: gs_scheduler_fit_all() against gs_scheduler_fit() node by node,
 * after every step of a seeded random walk of places, releases, health and
 * cordon changes, and nodes added and removed; and what it does not serve. */
static int fit_of(gs_scheduler* s, const gs_pod* pod, const char* name, size_t len) {
  int feasible = -1;
  OK(gs_scheduler_fit(s, pod, name, len, &feasible, NULL));
  return feasible;
}

static void check_fit_all(gs_scheduler* s, const gs_pod* pod) {
  gs_node_names* names = NULL;
  OK(gs_scheduler_node_names(s, &names));
  const char* buffer = NULL;
  const uint32_t* lengths = NULL;
  size_t count = 0;
  uint64_t generation = 0;
  gs_node_names_data(names, &buffer, &lengths, &count, &generation);
  uint8_t verdicts[64];
  size_t n = 99;
  uint64_t g = 0;
  int served = -1;
  OK(gs_scheduler_fit_all(s, pod, verdicts, sizeof verdicts, &n, &g, &served));
  CHECK(served == 1 && n == count && g == generation && g != 0);
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    CHECK(verdicts[i] == fit_of(s, pod, buffer + at, lengths[i]));
    at += lengths[i];
  }
  gs_node_names_free(names);
}

static void test_fit_all(void) {
  gs_scheduler* s = new_scheduler("binpack");
  uint64_t seed = 42;
#define NEXT(m) ((seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (m)
  char name[32], id[32];
  int next_node = 0, next_pod = 0;
  for (; next_node < 6; ++next_node) {
    snprintf(name, sizeof name, "n%d", next_node);
    OK(add_node(s, name, 1 + next_node % 4, 16));
  }
  gs_pod* probes[5];
  probes[0] = shared_pod("default/p4", 4, 1);
  probes[1] = shared_pod("default/p16", 16, 1);
  probes[2] = shared_pod("default/p2x2", 4, 2);
  gs_request whole;
  gs_request_init(&whole);
  whole.id = "default/whole";
  whole.whole_gpus = 2;
  OK(gs_pod_from_request(&whole, &probes[3]));
  probes[4] = shared_pod("default/p9", 9, 1);
  char placed[256][32];
  int placed_count = 0;
  for (int step = 0; step < 400; ++step) {
    const int op = (int)NEXT(10);
    snprintf(name, sizeof name, "n%d", (int)NEXT(next_node));
    if (op < 4) {
      snprintf(id, sizeof id, "default/w%d", next_pod++);
      gs_pod* w = shared_pod(id, 1 + (int64_t)NEXT(16), 1);
      gs_status* st = gs_scheduler_place(s, w, NULL);
      if (st == NULL && placed_count < 256) {
        strcpy(placed[placed_count++], id);
      } else if (st != NULL) {
        CHECK(gs_status_code(st) == GS_RESOURCE_EXHAUSTED);
        gs_status_free(st);
      }
      gs_pod_free(w);
    } else if (op < 7 && placed_count > 0) {
      const int k = (int)NEXT(placed_count);
      OK(gs_scheduler_release(s, ID(placed[k])));
      if (k != --placed_count) memcpy(placed[k], placed[placed_count], sizeof placed[k]);
    } else if (op == 7) {
      gs_status_free(gs_scheduler_set_gpu_healthy(s, ID(name), 0, (int)NEXT(2)));
    } else if (op == 8) {
      gs_status_free(gs_scheduler_set_node_schedulable(s, ID(name), (int)NEXT(3) != 0));
    } else if (next_node < 40) {
      /* Remove a node when it holds nothing (an error otherwise), add one. */
      gs_status_free(gs_scheduler_remove_node(s, ID(name)));
      snprintf(name, sizeof name, "n%d", next_node++);
      OK(add_node(s, name, 1 + next_node % 4, 16));
    }
    for (int k = 0; k < 5; ++k) check_fit_all(s, probes[k]);
  }
#undef NEXT
  /* Room for fewer than the nodes: as many as fit, and the count. */
  uint8_t one = 7;
  size_t n = 0;
  uint64_t g = 0;
  int served = 0;
  OK(gs_scheduler_fit_all(s, probes[0], &one, 1, &n, &g, &served));
  CHECK(served == 1 && n > 1 && (one == 0 || one == 1));
  OK(gs_scheduler_fit_all(s, probes[0], NULL, 0, &n, &g, &served));
  CHECK(served == 1 && n > 1);
  FAILS(gs_scheduler_fit_all(s, probes[0], NULL, 3, &n, &g, &served), GS_INVALID_ARGUMENT,
        "verdicts is NULL but its capacity is 3");
  FAILS(gs_scheduler_fit_all(s, probes[0], &one, 1, &n, &g, NULL), GS_INVALID_ARGUMENT,
        "served");
  /* A request bound to GPU models, or a pod with a node selector: not served. */
  const char* t4[] = {"T4"};
  gs_request models;
  gs_request_init(&models);
  models.id = "default/models";
  models.gpu_memory = 2;
  models.gpu_models = t4;
  models.gpu_model_count = 1;
  gs_pod* by_model = NULL;
  OK(gs_pod_from_request(&models, &by_model));
  OK(gs_scheduler_fit_all(s, by_model, &one, 1, &n, &g, &served));
  CHECK(served == 0 && n == 0 && g == 0);
  gs_pod_free(by_model);
  const char* selected =
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"sel\","
      "\"namespace\":\"default\",\"uid\":\"uid-sel\"},\"spec\":{\"nodeSelector\":{\"zone\":\"a\"},"
      "\"containers\":[{\"name\":\"main\",\"image\":\"x\",\"resources\":{\"limits\":"
      "{\"aliyun.com/gpu-mem\":\"2\"}}}]}}";
  gs_pod* sel = NULL;
  OK(gs_pod_parse(selected, strlen(selected), &sel));
  OK(gs_scheduler_fit_all(s, sel, &one, 1, &n, &g, &served));
  CHECK(served == 0);
  gs_pod_free(sel);
  /* Another node: another generation. */
  OK(gs_scheduler_fit_all(s, probes[0], NULL, 0, &n, &g, &served));
  OK(add_node(s, "late", 1, 16));
  uint64_t g2 = 0;
  size_t n2 = 0;
  OK(gs_scheduler_fit_all(s, probes[0], NULL, 0, &n2, &g2, &served));
  CHECK(g2 != g && n2 == n + 1);
  check_fit_all(s, probes[0]);
  OK(gs_scheduler_check(s));
  for (int k = 0; k < 5; ++k) gs_pod_free(probes[k]);
  gs_scheduler_destroy(s);
}

static void test_exhausted(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n1", 1, 8));
  gs_pod* first = shared_pod("default/first", 8, 1);
  gs_pod* second = shared_pod("default/second", 1, 1);
  OK(gs_scheduler_reserve(s, first, ID("n1"), NULL));
  char* before = snapshot(s);
  gs_placement* p = NULL;
  FAILS(gs_scheduler_reserve(s, second, ID("n1"), &p), GS_RESOURCE_EXHAUSTED,
        "does not fit on node 'n1'");
  FAILS(gs_scheduler_reserve(s, second, NULL, 0, &p), GS_RESOURCE_EXHAUSTED,
        "no node can host request 'default/second'");
  FAILS(gs_scheduler_place(s, second, &p), GS_RESOURCE_EXHAUSTED, "default/second");
  CHECK(p == NULL);
  char* after = snapshot(s);
  CHECK(strcmp(before, after) == 0);
  gs_string_free(before);
  gs_string_free(after);
  OK(gs_scheduler_check(s));
  gs_pod_free(first);
  gs_pod_free(second);
  gs_scheduler_destroy(s);
}

static void test_multi_card_and_exclusive(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "n4", 4, 16));
  gs_pod* two = shared_pod("default/two", 8, 2);
  gs_placement* p = NULL;
  OK(gs_scheduler_reserve(s, two, NULL, 0, &p));
  CHECK(strcmp(gs_placement_node(p), "n4") == 0);
  CHECK(gs_placement_gpu_count(p) == 2);
  CHECK(gs_placement_gpu(p, 0) < gs_placement_gpu(p, 1)); /* Ascending. */
  CHECK(gs_placement_memory_per_gpu(p) == 4);
  CHECK(gs_placement_exclusive(p) == 0);
  CHECK(contains(gs_placement_patch(p), "ALIYUN_COM_GPU_MEM_IDX\":\""));
  int g0 = gs_placement_gpu(p, 0), g1 = gs_placement_gpu(p, 1);
  gs_placement_free(p);

  gs_request r;
  gs_request_init(&r);
  r.id = "default/whole";
  r.whole_gpus = 2;
  gs_pod* whole = NULL;
  OK(gs_pod_from_request(&r, &whole));
  CHECK(gs_pod_uses_gpus(whole) == 1);
  OK(gs_scheduler_reserve(s, whole, ID("n4"), &p));
  CHECK(gs_placement_exclusive(p) == 1);
  CHECK(gs_placement_gpu_count(p) == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(gs_placement_gpu(p, i) != g0 && gs_placement_gpu(p, i) != g1);
  }
  gs_placement_free(p);
  /* No idle GPU is left for a third exclusive GPU. */
  r.id = "default/third";
  r.whole_gpus = 1;
  gs_pod* third = NULL;
  OK(gs_pod_from_request(&r, &third));
  FAILS(gs_scheduler_reserve(s, third, ID("n4"), NULL), GS_RESOURCE_EXHAUSTED, "idle GPU");
  OK(gs_scheduler_check(s));
  gs_pod_free(third);
  gs_pod_free(whole);
  gs_pod_free(two);
  gs_scheduler_destroy(s);
}

/* ---- Kubernetes ----------------------------------------------------------------- */

static const char* kNodeK1 =
    "{\"apiVersion\":\"v1\",\"kind\":\"Node\","
    "\"metadata\":{\"name\":\"k1\",\"labels\":{\"gpushare\":\"true\",\"zone\":\"a\"}},"
    "\"spec\":{},"
    "\"status\":{\"capacity\":{\"aliyun.com/gpu-mem\":\"32\",\"aliyun.com/gpu-count\":\"2\"},"
    "\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"10.0.0.1\"}]}}";

static const char* kNodeK2 =
    "{\"apiVersion\":\"v1\",\"kind\":\"Node\","
    "\"metadata\":{\"name\":\"k2\",\"labels\":{\"gpushare\":\"true\",\"zone\":\"b\"}},"
    "\"spec\":{},"
    "\"status\":{\"capacity\":{\"aliyun.com/gpu-mem\":\"32\",\"aliyun.com/gpu-count\":\"2\"},"
    "\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"10.0.0.2\"}]}}";

/* A v1.Pod asking for `units` of aliyun.com/gpu-mem; `extra_spec` is spliced
 * into its spec (a nodeName, an affinity) and `phase` is its status. */
static char* pod_json(const char* name, const char* uid, int units, const char* extra_spec,
                      const char* phase) {
  char* out = malloc(2048);
  CHECK(out != NULL);
  int n = snprintf(out, 2048,
                   "{\"apiVersion\":\"v1\",\"kind\":\"Pod\","
                   "\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\",\"uid\":\"%s\"},"
                   "\"spec\":{%s%s\"containers\":[{\"name\":\"main\",\"image\":\"x\","
                   "\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"%d\"}}}]},"
                   "\"status\":{\"phase\":\"%s\"}}",
                   name, uid, extra_spec, extra_spec[0] ? "," : "", units, phase);
  CHECK(n > 0 && n < 2048);
  return out;
}

static void test_kubernetes(void) {
  gs_scheduler* s = new_scheduler("binpack");
  gs_event_report report;
  memset(&report, 0xff, sizeof(report));
  report.size = sizeof(report);
  OK(gs_scheduler_apply_node_event(s, "ADDED", kNodeK1, strlen(kNodeK1), &report));
  CHECK(report.nodes_added == 1 && report.nodes_updated == 0 && report.nodes_removed == 0);
  CHECK(report.confirmed == 0 && report.released == 0 && report.warnings == 0);
  OK(gs_scheduler_apply_node_event(s, "ADDED", kNodeK2, strlen(kNodeK2), NULL));
  FAILS(gs_scheduler_apply_node_event(s, "BOOKMARK", kNodeK1, strlen(kNodeK1), NULL),
        GS_INVALID_ARGUMENT, "BOOKMARK");
  FAILS(gs_scheduler_apply_node_event(s, "ADDED", "{", 1, NULL), GS_INVALID_ARGUMENT, "node");
  report.size = 8;
  FAILS(gs_scheduler_apply_node_event(s, "MODIFIED", kNodeK1, strlen(kNodeK1), &report),
        GS_INVALID_ARGUMENT, "report->size is 8");
  report.size = sizeof(report);

  /* A pending pod: parse, fit, reserve through the extender. */
  char* pending = pod_json("a", "uid-a", 4, "", "Pending");
  gs_pod* a = NULL;
  OK(gs_pod_parse(pending, strlen(pending), &a));
  CHECK(strcmp(gs_pod_id(a), "default/a") == 0);
  CHECK(gs_pod_uses_gpus(a) == 1);
  int feasible = -1;
  OK(gs_scheduler_fit(s, a, ID("k1"), &feasible, NULL));
  CHECK(feasible == 1);
  gs_placement* p = NULL;
  OK(gs_scheduler_reserve(s, a, ID("k1"), &p));
  CHECK(strcmp(gs_placement_node(p), "k1") == 0);
  CHECK(gs_placement_memory_per_gpu(p) == 4);
  const char* patch = gs_placement_patch(p);
  CHECK(contains(patch, "{\"metadata\":{\"annotations\":{"));
  CHECK(contains(patch, "\"ALIYUN_COM_GPU_MEM_IDX\":\""));
  CHECK(contains(patch, "\"ALIYUN_COM_GPU_MEM_POD\":\"4\""));
  CHECK(contains(patch, "\"ALIYUN_COM_GPU_MEM_ASSIGNED\":\"false\""));
  CHECK(contains(patch, "scheduler.framework.gpushare.allocation"));
  char idx[8];
  snprintf(idx, sizeof(idx), "%d", gs_placement_gpu(p, 0));
  gs_placement_free(p);
  /* A retried bind: the same placement. */
  OK(gs_scheduler_reserve(s, a, ID("k1"), &p));
  CHECK(gs_placement_gpu(p, 0) == atoi(idx));
  gs_placement_free(p);

  /* The pod bound to its node: the event confirms the reservation. */
  char annotated[2600];
  char* bound = pod_json("a", "uid-a", 4, "\"nodeName\":\"k1\"", "Running");
  OK(gs_scheduler_apply_pod_event(s, "MODIFIED", bound, strlen(bound), &report));
  CHECK(report.confirmed == 1 && report.released == 0 && report.restored == 0);
  FAILS(gs_scheduler_forget(s, ID("default/a")), GS_FAILED_PRECONDITION, "release it instead");
  /* An event about another pod of the same name changes nothing. */
  char* stranger = pod_json("a", "uid-other", 4, "\"nodeName\":\"k1\"", "Running");
  OK(gs_scheduler_apply_pod_event(s, "DELETED", stranger, strlen(stranger), &report));
  CHECK(report.released == 0);
  OK(gs_scheduler_placement(s, ID("default/a"), &p));
  gs_placement_free(p);
  /* Deleted: released. */
  OK(gs_scheduler_apply_pod_event(s, "DELETED", bound, strlen(bound), &report));
  CHECK(report.released == 1);
  FAILS(gs_scheduler_placement(s, ID("default/a"), &p), GS_NOT_FOUND, "default/a");

  /* A bound pod with bind annotations gpushare does not hold is restored. */
  char* other = pod_json("b", "uid-b", 6, "\"nodeName\":\"k2\"", "Running");
  /* Splice the annotations into metadata. */
  const char* meta = "\"uid\":\"uid-b\"";
  char* at = strstr(other, meta);
  CHECK(at != NULL);
  size_t head = (size_t)(at - other) + strlen(meta);
  snprintf(annotated, sizeof(annotated),
           "%.*s,\"annotations\":{\"ALIYUN_COM_GPU_MEM_IDX\":\"1\"}%s", (int)head, other,
           other + head);
  OK(gs_scheduler_apply_pod_event(s, "ADDED", annotated, strlen(annotated), &report));
  CHECK(report.restored == 1);
  OK(gs_scheduler_placement(s, ID("default/b"), &p));
  CHECK(strcmp(gs_placement_node(p), "k2") == 0);
  CHECK(gs_placement_gpu(p, 0) == 1);
  gs_placement_free(p);

  /* Required node affinity: zone b only. */
  const char* affinity =
      "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":"
      "{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":\"In\","
      "\"values\":[\"b\"]}]}]}}}";
  char* zoned_json = pod_json("zoned", "uid-z", 2, affinity, "Pending");
  gs_pod* zoned = NULL;
  OK(gs_pod_parse(zoned_json, strlen(zoned_json), &zoned));
  char* reason = NULL;
  OK(gs_scheduler_fit(s, zoned, ID("k1"), &feasible, &reason));
  CHECK(feasible == 0);
  CHECK(strcmp(reason, "node(s) didn't match Pod's node affinity/selector") == 0);
  gs_string_free(reason);
  OK(gs_scheduler_fit(s, zoned, ID("zz"), &feasible, &reason));
  CHECK(feasible == 0 && contains(reason, "unknown to gpushare"));
  gs_string_free(reason);
  const char* list[2] = {"k1", "k2"};
  char buf[8];
  uint32_t lengths[2];
  gs_names names = names_of(list, 2, buf, lengths);
  int64_t ranks[2];
  OK(gs_scheduler_rank(s, zoned, &names, ranks));
  CHECK(ranks[0] == -1 && ranks[1] == 10);
  FAILS(gs_scheduler_reserve(s, zoned, ID("k1"), NULL), GS_RESOURCE_EXHAUSTED,
        "didn't match Pod's node affinity");
  /* Any node: the one its affinity allows, though binpack ties would say k2 or k1. */
  OK(gs_scheduler_reserve(s, zoned, NULL, 0, &p));
  CHECK(strcmp(gs_placement_node(p), "k2") == 0);
  CHECK(contains(gs_placement_patch(p), "ALIYUN_COM_GPU_MEM_IDX"));
  gs_placement_free(p);
  OK(gs_scheduler_release(s, ID("default/zoned")));

  /* A pod asking for no GPUs fits everywhere, as the extender says. */
  const char* plain =
      "{\"metadata\":{\"name\":\"web\",\"namespace\":\"default\",\"uid\":\"u\"},"
      "\"spec\":{\"containers\":[{\"name\":\"c\"}]}}";
  gs_pod* web = NULL;
  OK(gs_pod_parse(plain, strlen(plain), &web));
  CHECK(gs_pod_uses_gpus(web) == 0);
  OK(gs_scheduler_fit(s, web, ID("zz"), &feasible, NULL));
  CHECK(feasible == 1);
  OK(gs_scheduler_rank(s, web, &names, ranks));
  CHECK(ranks[0] == 0 && ranks[1] == 0);
  gs_pod_free(web);

  /* Malformed pods. */
  gs_pod* bad = NULL;
  FAILS(gs_pod_parse("{", 1, &bad), GS_INVALID_ARGUMENT, "");
  FAILS(gs_pod_parse("{\"metadata\":{}}", 15, &bad), GS_INVALID_ARGUMENT, "name");
  const char* upper = "{\"metadata\":{\"name\":\"Web\"},\"spec\":{}}";
  FAILS(gs_pod_parse(upper, strlen(upper), &bad), GS_INVALID_ARGUMENT, "pod metadata.name");
  FAILS(gs_pod_parse(NULL, 3, &bad), GS_INVALID_ARGUMENT, "json is NULL");
  CHECK(bad == NULL);

  /* A deleted node holding placements is cordoned until it holds nothing. */
  OK(gs_scheduler_apply_node_event(s, "DELETED", kNodeK2, strlen(kNodeK2), &report));
  CHECK(report.nodes_removed == 0 && report.warnings == 1);
  OK(gs_scheduler_release(s, ID("default/b")));
  OK(gs_scheduler_apply_node_event(s, "DELETED", kNodeK2, strlen(kNodeK2), &report));
  CHECK(report.nodes_removed == 1);

  OK(gs_scheduler_check(s));
  free(zoned_json);
  gs_pod_free(zoned);
  free(other);
  free(stranger);
  free(bound);
  gs_pod_free(a);
  free(pending);
  gs_scheduler_destroy(s);
}

/* ---- NULL arguments ---------------------------------------------------------------- */

/* gs_scheduler_fit (one node, its own path) answers as the reference,
 * gs_scheduler_filter, on every node: feasible and reason, for plain and
 * parsed pods, with affinities, selectors, models, partly full, unhealthy
 * and cordoned nodes. */
static void test_fit_agrees_with_filter(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(gs_scheduler_apply_node_event(s, "ADDED", kNodeK1, strlen(kNodeK1), NULL));
  OK(gs_scheduler_apply_node_event(s, "ADDED", kNodeK2, strlen(kNodeK2), NULL));
  OK(add_node(s, "t1", 1, 16));
  OK(add_node(s, "t4", 4, 8));
  OK(add_node(s, "cordoned", 2, 16));
  OK(gs_scheduler_set_node_schedulable(s, ID("cordoned"), 0));
  OK(add_node(s, "sick", 2, 16));
  OK(gs_scheduler_set_gpu_healthy(s, ID("sick"), 0, 0));
  gs_node cpu;
  gs_node_init(&cpu);
  cpu.name = "cpu-only";
  OK(gs_scheduler_add_node(s, &cpu));
  gs_pod* filler = shared_pod("default/filler", 6, 1);
  OK(gs_scheduler_reserve(s, filler, ID("t4"), NULL));
  OK(gs_scheduler_reserve(s, filler, ID("t4"), NULL));
  gs_pod_free(filler);

  const char* affinity =
      "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":"
      "{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":\"In\","
      "\"values\":[\"b\"]}]}]}}}";
  const char* selector = "\"nodeSelector\":{\"zone\":\"a\"}";
  const char* cpu_pod =
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"web\","
      "\"namespace\":\"default\",\"uid\":\"uid-w\"},\"spec\":{\"containers\":[{\"name\":"
      "\"main\",\"image\":\"x\"}]}}";
  gs_pod* pods[12];
  size_t n = 0;
  pods[n++] = shared_pod("default/s2", 2, 1);
  pods[n++] = shared_pod("default/s9", 9, 1);
  pods[n++] = shared_pod("default/s16", 16, 1);
  pods[n++] = shared_pod("default/m8x4", 8, 4);
  pods[n++] = shared_pod("default/m32x2", 32, 2);
  gs_request r;
  gs_request_init(&r);
  r.id = "default/whole2";
  r.whole_gpus = 2;
  OK(gs_pod_from_request(&r, &pods[n++]));
  const char* v100[] = {"V100"};
  gs_request_init(&r);
  r.id = "default/v100";
  r.gpu_memory = 1;
  r.gpu_models = v100;
  r.gpu_model_count = 1;
  OK(gs_pod_from_request(&r, &pods[n++]));
  gs_request_init(&r);
  r.id = "default/compute";
  r.gpu_memory = 1;
  r.compute = 600;
  OK(gs_pod_from_request(&r, &pods[n++]));
  char* json[3];
  json[0] = pod_json("zoned", "uid-z", 2, affinity, "Pending");
  json[1] = pod_json("selected", "uid-s", 20, selector, "Pending");
  json[2] = pod_json("plain", "uid-p", 3, "", "Pending");
  for (int i = 0; i < 3; ++i) OK(gs_pod_parse(json[i], strlen(json[i]), &pods[n++]));
  OK(gs_pod_parse(cpu_pod, strlen(cpu_pod), &pods[n++]));

  int compared = 0;
  for (size_t i = 0; i < n; ++i) {
    gs_fit_results* all = NULL;
    OK(gs_scheduler_filter(s, pods[i], NULL, &all));
    size_t count = gs_fit_results_count(all);
    CHECK(count == 7);
    for (size_t k = 0; k <= count; ++k) {
      /* k == count: a node gpushare does not know. */
      const char* node = k < count ? gs_fit_results_node(all, k) : "nowhere";
      int feasible = -1;
      char* reason = NULL;
      OK(gs_scheduler_fit(s, pods[i], node, strlen(node), &feasible, &reason));
      if (k < count) {
        CHECK(feasible == gs_fit_results_feasible(all, k));
        CHECK(feasible ? reason == NULL : strcmp(reason, gs_fit_results_reason(all, k)) == 0);
      } else {
        const gs_names unknown = {"nowhere", (const uint32_t[]){7}, 1};
        gs_fit_results* one = NULL;
        OK(gs_scheduler_filter(s, pods[i], &unknown, &one));
        CHECK(feasible == gs_fit_results_feasible(one, 0));
        CHECK(feasible ? reason == NULL : strcmp(reason, gs_fit_results_reason(one, 0)) == 0);
        gs_fit_results_free(one);
      }
      gs_string_free(reason);
      ++compared;
    }
    gs_fit_results_free(all);
  }
  CHECK(compared == (int)(n * 8));
  for (size_t i = 0; i < n; ++i) gs_pod_free(pods[i]);
  for (int i = 0; i < 3; ++i) free(json[i]);
  gs_scheduler_destroy(s);
}

static void test_nulls(void) {
  gs_status_free(NULL);
  gs_string_free(NULL);
  gs_pod_free(NULL);
  gs_placement_free(NULL);
  gs_fit_results_free(NULL);
  gs_scheduler_destroy(NULL);
  gs_scheduler_options_init(NULL);
  gs_node_init(NULL);
  gs_request_init(NULL);
  CHECK(gs_status_code(NULL) == GS_OK);
  CHECK(strcmp(gs_status_message(NULL), "") == 0);
  CHECK(strcmp(gs_pod_id(NULL), "") == 0);
  CHECK(gs_pod_uses_gpus(NULL) == 0);
  CHECK(gs_fit_results_count(NULL) == 0);
  CHECK(gs_fit_results_node(NULL, 0) == NULL);
  CHECK(strcmp(gs_placement_node(NULL), "") == 0);
  CHECK(strcmp(gs_placement_request_id(NULL), "") == 0);
  CHECK(strcmp(gs_placement_patch(NULL), "") == 0);
  CHECK(gs_placement_gpu_count(NULL) == 0);
  CHECK(gs_placement_gpu(NULL, 0) == -1);
  CHECK(gs_scheduler_expire(NULL) == 0);

  gs_scheduler* s = new_scheduler("spread");
  OK(add_node(s, "n1", 1, 16));
  gs_pod* pod = shared_pod("default/p", 1, 1);
  gs_node n;
  gs_node_init(&n);
  gs_placement* p = NULL;
  gs_fit_results* fits = NULL;
  int feasible = 0;
  int64_t ranks[1];
  gs_names names = {"n1", (const uint32_t[]){2}, 1};
  char* json = NULL;

  FAILS(gs_scheduler_add_node(NULL, &n), GS_INVALID_ARGUMENT, "scheduler is NULL");
  FAILS(gs_scheduler_add_node(s, NULL), GS_INVALID_ARGUMENT, "node is NULL");
  FAILS(gs_scheduler_remove_node(NULL, ID("n1")), GS_INVALID_ARGUMENT, "scheduler is NULL");
  FAILS(gs_scheduler_remove_node(s, NULL, 2), GS_INVALID_ARGUMENT, "name is NULL");
  FAILS(gs_scheduler_set_node_schedulable(NULL, ID("n1"), 1), GS_INVALID_ARGUMENT, "scheduler");
  FAILS(gs_scheduler_set_gpu_healthy(NULL, ID("n1"), 0, 1), GS_INVALID_ARGUMENT, "scheduler");
  FAILS(gs_scheduler_apply_node_event(NULL, "ADDED", "{}", 2, NULL), GS_INVALID_ARGUMENT,
        "scheduler");
  FAILS(gs_scheduler_apply_pod_event(s, NULL, "{}", 2, NULL), GS_INVALID_ARGUMENT,
        "type is NULL");
  FAILS(gs_scheduler_apply_pod_event(s, "ADDED", NULL, 2, NULL), GS_INVALID_ARGUMENT,
        "json is NULL");
  FAILS(gs_pod_from_request(NULL, &pod), GS_INVALID_ARGUMENT, "request is NULL");
  FAILS(gs_pod_parse("{}", 2, NULL), GS_INVALID_ARGUMENT, "out is NULL");
  FAILS(gs_scheduler_fit(NULL, pod, ID("n1"), &feasible, NULL), GS_INVALID_ARGUMENT,
        "scheduler is NULL");
  FAILS(gs_scheduler_fit(s, NULL, ID("n1"), &feasible, NULL), GS_INVALID_ARGUMENT,
        "pod is NULL");
  FAILS(gs_scheduler_fit(s, pod, ID("n1"), NULL, NULL), GS_INVALID_ARGUMENT,
        "feasible is NULL");
  FAILS(gs_scheduler_fit(s, pod, NULL, 2, &feasible, NULL), GS_INVALID_ARGUMENT,
        "node is NULL");
  FAILS(gs_scheduler_filter(s, pod, &names, NULL), GS_INVALID_ARGUMENT, "out is NULL");
  FAILS(gs_scheduler_filter(NULL, pod, &names, &fits), GS_INVALID_ARGUMENT, "scheduler");
  FAILS(gs_scheduler_rank(s, NULL, &names, ranks), GS_INVALID_ARGUMENT, "pod is NULL");
  FAILS(gs_scheduler_reserve(NULL, pod, ID("n1"), &p), GS_INVALID_ARGUMENT, "scheduler");
  FAILS(gs_scheduler_reserve(s, NULL, ID("n1"), &p), GS_INVALID_ARGUMENT, "pod is NULL");
  FAILS(gs_scheduler_reserve(s, pod, NULL, 2, &p), GS_INVALID_ARGUMENT, "node is NULL");
  FAILS(gs_scheduler_place(s, NULL, &p), GS_INVALID_ARGUMENT, "pod is NULL");
  FAILS(gs_scheduler_confirm(NULL, ID("x")), GS_INVALID_ARGUMENT, "scheduler");
  FAILS(gs_scheduler_forget(s, NULL, 1), GS_INVALID_ARGUMENT, "id is NULL");
  FAILS(gs_scheduler_release(s, NULL, 1), GS_INVALID_ARGUMENT, "id is NULL");
  FAILS(gs_scheduler_placement(s, ID("x"), NULL), GS_INVALID_ARGUMENT, "out is NULL");
  FAILS(gs_scheduler_snapshot(NULL, &json), GS_INVALID_ARGUMENT, "scheduler");
  FAILS(gs_scheduler_snapshot(s, NULL), GS_INVALID_ARGUMENT, "json is NULL");
  FAILS(gs_scheduler_check(NULL), GS_INVALID_ARGUMENT, "scheduler");
  CHECK(p == NULL && fits == NULL && json == NULL);
  /* (NULL, 0) is the empty string: an unknown node, or "any node". */
  OK(gs_scheduler_fit(s, pod, NULL, 0, &feasible, NULL));
  CHECK(feasible == 0);
  OK(gs_scheduler_reserve(s, pod, NULL, 0, NULL)); /* `out` may be NULL. */
  OK(gs_scheduler_release(s, ID("default/p")));

  gs_pod_free(pod);
  gs_scheduler_destroy(s);
}

static void test_snapshot(void) {
  gs_scheduler* s = new_scheduler("binpack");
  OK(add_node(s, "alpha", 2, 16));
  gs_pod* pod = shared_pod("default/snap", 3, 1);
  OK(gs_scheduler_reserve(s, pod, ID("alpha"), NULL));
  char* json = snapshot(s);
  CHECK(json[0] == '{');
  CHECK(contains(json, "\"alpha\""));
  CHECK(contains(json, "default/snap"));
  gs_string_free(json);
  OK(gs_scheduler_check(s));
  gs_pod_free(pod);
  gs_scheduler_destroy(s);
}

/* ---- Threads -------------------------------------------------------------------------- */

enum { kThreads = 4, kRounds = 300, kKeep = 25, kNodes = 3, kGpus = 4, kMemory = 16 };

/* The last thread works with Kubernetes pods (through the extender), the
 * others with plain requests. */
static void id_of(int thread, int round, char* id, size_t size) {
  if (thread == kThreads - 1) {
    snprintf(id, size, "default/t%d-p%d", thread, round);
  } else {
    snprintf(id, size, "t%d/p%d", thread, round);
  }
}

struct worker {
  gs_scheduler* s;
  int index;
  int reserved, refused, kept;
  int failed; /* An unexpected status: its code. */
};

static void* work(void* arg) {
  struct worker* w = arg;
  char id[64];
  for (int i = 0; i < kRounds; ++i) {
    id_of(w->index, i, id, sizeof(id));
    gs_request r;
    gs_request_init(&r);
    r.id = id;
    r.gpu_memory = 1 + (i + w->index) % 6;
    r.gpu_count = (i % 7 == 0) ? 2 : 1;
    if (r.gpu_memory % r.gpu_count != 0) r.gpu_memory *= 2;
    gs_pod* pod = NULL;
    gs_status* st = NULL;
    if (w->index == kThreads - 1) {
      char name[32], uid[32];
      snprintf(name, sizeof(name), "t%d-p%d", w->index, i);
      snprintf(uid, sizeof(uid), "uid-%d-%d", w->index, i);
      r.gpu_count = 1;
      char* json = pod_json(name, uid, (int)r.gpu_memory, "", "Pending");
      st = gs_pod_parse(json, strlen(json), &pod);
      free(json);
    } else {
      st = gs_pod_from_request(&r, &pod);
    }
    if (st != NULL) {
      w->failed = gs_status_code(st);
      gs_status_free(st);
      return NULL;
    }
    gs_placement* p = NULL;
    st = gs_scheduler_reserve(w->s, pod, NULL, 0, &p);
    if (st != NULL) {
      if (gs_status_code(st) != GS_RESOURCE_EXHAUSTED) w->failed = gs_status_code(st);
      gs_status_free(st);
      ++w->refused;
    } else {
      ++w->reserved;
      if (gs_placement_gpu_count(p) != (size_t)r.gpu_count) w->failed = -1;
      gs_placement_free(p);
      /* Keep some, confirmed; forget or release the others. */
      gs_status* end = NULL;
      if (i % kKeep == 0) {
        end = gs_scheduler_confirm(w->s, id, strlen(id));
        ++w->kept;
      } else if (i % 2 == 0) {
        end = gs_scheduler_forget(w->s, id, strlen(id));
      } else {
        end = gs_scheduler_release(w->s, id, strlen(id));
      }
      if (end != NULL) {
        w->failed = gs_status_code(end);
        gs_status_free(end);
      }
    }
    /* Readers in between. */
    int feasible = 0;
    st = gs_scheduler_fit(w->s, pod, "n0", 2, &feasible, NULL);
    if (st != NULL) {
      w->failed = gs_status_code(st);
      gs_status_free(st);
    }
    gs_pod_free(pod);
  }
  return NULL;
}

static void test_threads(void) {
  gs_scheduler* s = new_scheduler("binpack");
  for (int n = 0; n < kNodes; ++n) {
    char name[8];
    snprintf(name, sizeof(name), "n%d", n);
    OK(add_node(s, name, kGpus, kMemory));
  }
  pthread_t threads[kThreads];
  struct worker workers[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    memset(&workers[t], 0, sizeof(workers[t]));
    workers[t].s = s;
    workers[t].index = t;
    CHECK(pthread_create(&threads[t], NULL, work, &workers[t]) == 0);
  }
  int kept = 0, reserved = 0;
  for (int t = 0; t < kThreads; ++t) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    CHECK(workers[t].failed == 0);
    kept += workers[t].kept;
    reserved += workers[t].reserved;
  }
  CHECK(reserved > kept);
  OK(gs_scheduler_check(s));

  /* Every kept placement is there, and no GPU holds more than it has. */
  int64_t used[kNodes][kGpus];
  memset(used, 0, sizeof(used));
  int found = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRounds; ++i) {
      char id[64];
      id_of(t, i, id, sizeof(id));
      gs_placement* p = NULL;
      gs_status* st = gs_scheduler_placement(s, id, strlen(id), &p);
      if (st != NULL) {
        CHECK(gs_status_code(st) == GS_NOT_FOUND);
        gs_status_free(st);
        continue;
      }
      CHECK(i % kKeep == 0); /* Only kept ones remain. */
      ++found;
      int node = gs_placement_node(p)[1] - '0';
      CHECK(node >= 0 && node < kNodes);
      for (size_t g = 0; g < gs_placement_gpu_count(p); ++g) {
        int gpu = gs_placement_gpu(p, g);
        CHECK(gpu >= 0 && gpu < kGpus);
        used[node][gpu] += gs_placement_memory_per_gpu(p);
      }
      gs_placement_free(p);
    }
  }
  CHECK(found == kept);
  for (int n = 0; n < kNodes; ++n) {
    for (int g = 0; g < kGpus; ++g) CHECK(used[n][g] <= kMemory);
  }
  gs_scheduler_destroy(s);
}

int main(void) {
  test_version();
  test_create();
  test_target_workload();
  test_nodes();
  test_fit_filter_rank();
  test_requests();
  test_lifecycle();
  test_ttl();
  test_reservation_tokens();
  test_fit_after();
  test_fit_all();
  test_exhausted();
  test_multi_card_and_exclusive();
  test_kubernetes();
  test_fit_agrees_with_filter();
  test_nulls();
  test_snapshot();
  test_threads();
  printf("c_abi_test: %d checks passed\n", checks);
  return 0;
}
