// File: device-plugin/nvml_abi.h
// -----------------------------------------------------------------------------
// The few parts of NVML's C ABI that gpushare uses, declared from NVML's
// public API reference (docs.nvidia.com/deploy/nvml-api): return codes, the
// opaque device handle, the memory and PCI structures, and the signature of
// each call. Both the run-time loader (nvml.cc) and the fixture-driven
// stand-in library of the tests (tests/nvml_stub/) use these, so they agree
// by construction.

#ifndef GPUSHARE_DEVICE_PLUGIN_NVML_ABI_H_
#define GPUSHARE_DEVICE_PLUGIN_NVML_ABI_H_

extern "C" {

typedef int nvmlReturn_t;
enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

// Buffer sizes NVML documents for its string answers.
enum : unsigned {
  kNvmlUuidBufferSize = 96,
  kNvmlNameBufferSize = 96,
  kNvmlDriverVersionBufferSize = 80,
};

// Events (nvmlEventSet*): a critical XID and a double-bit ECC error.
typedef struct nvmlEventSet_st* nvmlEventSet_t;
enum : unsigned long long {
  nvmlEventTypeDoubleBitEccError = 0x2ull,
  nvmlEventTypeXidCriticalError = 0x8ull,
};
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // The XID, for XidCriticalError.
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

// Topology: the common ancestor of two GPUs (nvmlGpuTopologyLevel_t) and
// NVLinks (NVML_NVLINK_MAX_LINKS per GPU).
enum : int {
  NVML_TOPOLOGY_INTERNAL = 0,
  NVML_TOPOLOGY_SINGLE = 10,
  NVML_TOPOLOGY_MULTIPLE = 20,
  NVML_TOPOLOGY_HOSTBRIDGE = 30,
  NVML_TOPOLOGY_NODE = 40,
  NVML_TOPOLOGY_SYSTEM = 50,
};
enum : unsigned { kNvmlNvLinkMaxLinks = 18 };

typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_fn)(char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetPciInfo_v3_fn)(nvmlDevice_t, nvmlPciInfo_t*);
typedef nvmlReturn_t (*nvmlDeviceGetCudaComputeCapability_fn)(nvmlDevice_t, int*, int*);
typedef nvmlReturn_t (*nvmlDeviceGetMigMode_fn)(nvmlDevice_t, unsigned int*, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetNumaNodeId_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetMinorNumber_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetTopologyCommonAncestor_fn)(nvmlDevice_t, nvmlDevice_t, int*);
typedef nvmlReturn_t (*nvmlDeviceGetNvLinkState_fn)(nvmlDevice_t, unsigned int, int*);
typedef nvmlReturn_t (*nvmlDeviceGetNvLinkRemotePciInfo_v2_fn)(nvmlDevice_t, unsigned int,
                                                               nvmlPciInfo_t*);
typedef nvmlReturn_t (*nvmlEventSetCreate_fn)(nvmlEventSet_t*);
typedef nvmlReturn_t (*nvmlEventSetFree_fn)(nvmlEventSet_t);
typedef nvmlReturn_t (*nvmlDeviceRegisterEvents_fn)(nvmlDevice_t, unsigned long long,
                                                    nvmlEventSet_t);
typedef nvmlReturn_t (*nvmlEventSetWait_v2_fn)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);

}  // extern "C"

#endif  // GPUSHARE_DEVICE_PLUGIN_NVML_ABI_H_
