package nsysgen

import "strings"

// The DDL below lists the columns of the real exports in their real order (schema 2.9.1 as
// found in a 2022.2 export, 3.x per the Nsight Systems SQLite schema reference for 3.28.1).
// Column comments are left out: they are documentation, not schema.

const ddlStringIds = `CREATE TABLE StringIds (
    id INTEGER NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
)`

const ddlRuntime = `CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL,
    globalTid INTEGER,
    correlationId INTEGER,
    nameId INTEGER NOT NULL REFERENCES StringIds(id),
    returnValue INTEGER NOT NULL,
    callchainId INTEGER
)`

func kernelDDL(s schema) string {
	cols := []string{
		"start INTEGER NOT NULL",
		"end INTEGER NOT NULL",
		"deviceId INTEGER NOT NULL",
		"contextId INTEGER NOT NULL",
	}
	if s.green() {
		cols = append(cols, "greenContextId INTEGER")
	}
	cols = append(cols,
		"streamId INTEGER NOT NULL",
		"correlationId INTEGER",
		"globalPid INTEGER",
		"demangledName INTEGER NOT NULL",
		"shortName INTEGER NOT NULL",
		"mangledName INTEGER",
		"launchType INTEGER",
		"cacheConfig INTEGER",
		"registersPerThread INTEGER NOT NULL",
		"gridX INTEGER NOT NULL",
		"gridY INTEGER NOT NULL",
		"gridZ INTEGER NOT NULL",
		"blockX INTEGER NOT NULL",
		"blockY INTEGER NOT NULL",
		"blockZ INTEGER NOT NULL",
		"staticSharedMemory INTEGER NOT NULL",
		"dynamicSharedMemory INTEGER NOT NULL",
		"localMemoryPerThread INTEGER NOT NULL",
		"localMemoryTotal INTEGER NOT NULL",
		"gridId INTEGER NOT NULL",
		"sharedMemoryExecuted INTEGER",
		"graphNodeId INTEGER",
		"sharedMemoryLimitConfig INTEGER",
	)
	if s.recent() {
		cols = append(cols,
			"qmdBulkReleaseDone INTEGER",
			"qmdPreexitDone INTEGER",
			"qmdLastCtaDone INTEGER",
			"graphId INTEGER",
			"clusterX INTEGER",
			"clusterY INTEGER",
			"clusterZ INTEGER",
			"clusterSchedulingPolicy INTEGER",
			"maxPotentialClusterSize INTEGER",
			"maxActiveClusters INTEGER",
			"sharedMemoryRequestedPercentage INTEGER",
			"tensorSizeMinusOneElements INTEGER",
		)
	}
	return tableDDL("CUPTI_ACTIVITY_KIND_KERNEL", cols)
}

func memcpyDDL(s schema) string {
	cols := []string{
		"start INTEGER NOT NULL",
		"end INTEGER NOT NULL",
		"deviceId INTEGER NOT NULL",
		"contextId INTEGER NOT NULL",
	}
	if s.green() {
		cols = append(cols, "greenContextId INTEGER")
	}
	cols = append(cols,
		"streamId INTEGER NOT NULL",
		"correlationId INTEGER",
		"globalPid INTEGER",
		"bytes INTEGER NOT NULL",
		"copyKind INTEGER NOT NULL",
		"deprecatedSrcId INTEGER",
		"srcKind INTEGER",
		"dstKind INTEGER",
		"srcDeviceId INTEGER",
		"srcContextId INTEGER",
		"dstDeviceId INTEGER",
		"dstContextId INTEGER",
		"migrationCause INTEGER",
		"graphNodeId INTEGER",
		"virtualAddress INTEGER",
	)
	if s.recent() {
		cols = append(cols, "copyCount INTEGER")
	}
	return tableDDL("CUPTI_ACTIVITY_KIND_MEMCPY", cols)
}

func memsetDDL(s schema) string {
	cols := []string{
		"start INTEGER NOT NULL",
		"end INTEGER NOT NULL",
		"deviceId INTEGER NOT NULL",
		"contextId INTEGER NOT NULL",
	}
	if s.green() {
		cols = append(cols, "greenContextId INTEGER")
	}
	cols = append(cols,
		"streamId INTEGER NOT NULL",
		"correlationId INTEGER",
		"globalPid INTEGER",
		"value INTEGER NOT NULL",
		"bytes INTEGER NOT NULL",
		"graphNodeId INTEGER",
		"memKind INTEGER",
	)
	return tableDDL("CUPTI_ACTIVITY_KIND_MEMSET", cols)
}

func nvtxDDL(s schema) string {
	cols := []string{
		"start INTEGER NOT NULL",
		"end INTEGER",
		"eventType INTEGER NOT NULL",
		"rangeId INTEGER",
		"category INTEGER",
		"color INTEGER",
		"text TEXT",
		"globalTid INTEGER",
		"endGlobalTid INTEGER",
		"textId INTEGER REFERENCES StringIds(id)",
		"domainId INTEGER",
		"uint64Value INTEGER",
		"int64Value INTEGER",
		"doubleValue REAL",
		"uint32Value INTEGER",
		"int32Value INTEGER",
		"floatValue REAL",
		"jsonTextId INTEGER",
		"jsonText TEXT",
	}
	if s.recent() {
		cols = append(cols, "binaryData BLOB", "eventId INTEGER NOT NULL PRIMARY KEY")
	}
	return tableDDL("NVTX_EVENTS", cols)
}

var ddlGPU = tableDDL("TARGET_INFO_GPU", []string{
	"vmId INTEGER NOT NULL",
	"id INTEGER NOT NULL",
	"name TEXT",
	"busLocation TEXT",
	"isDiscrete INTEGER",
	"l2CacheSize INTEGER",
	"totalMemory INTEGER",
	"memoryBandwidth INTEGER",
	"clockRate INTEGER",
	"smCount INTEGER",
	"pwGpuId INTEGER",
	"uuid TEXT",
	"luid INTEGER",
	"chipName TEXT",
	"cuDevice INTEGER",
	"ctxswDevPath TEXT",
	"ctrlDevPath TEXT",
	"revision INTEGER",
	"nodeMask INTEGER",
	"constantMemory INTEGER",
	"maxIPC INTEGER",
	"maxRegistersPerBlock INTEGER",
	"maxShmemPerBlock INTEGER",
	"maxShmemPerBlockOptin INTEGER",
	"maxShmemPerSm INTEGER",
	"maxRegistersPerSm INTEGER",
	"threadsPerWarp INTEGER",
	"asyncEngines INTEGER",
	"maxWarpsPerSm INTEGER",
	"maxBlocksPerSm INTEGER",
	"maxThreadsPerBlock INTEGER",
	"maxBlockDimX INTEGER",
	"maxBlockDimY INTEGER",
	"maxBlockDimZ INTEGER",
	"maxGridDimX INTEGER",
	"maxGridDimY INTEGER",
	"maxGridDimZ INTEGER",
	"computeMajor INTEGER",
	"computeMinor INTEGER",
	"smMajor INTEGER",
	"smMinor INTEGER",
})

const ddlProcesses = `CREATE TABLE PROCESSES (
    globalPid INTEGER,
    pid INTEGER,
    name TEXT
)`

const ddlThreadNames = `CREATE TABLE ThreadNames (
    nameId INTEGER NOT NULL REFERENCES StringIds(id),
    priority INTEGER,
    globalTid INTEGER
)`

const ddlSessionStart = `CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs INTEGER,
    utcTime TEXT,
    localTime TEXT
)`

const ddlAnalysis = `CREATE TABLE ANALYSIS_DETAILS (
    globalVid INTEGER NOT NULL,
    duration INTEGER NOT NULL,
    startTime INTEGER NOT NULL,
    stopTime INTEGER NOT NULL
)`

func (w *Writer) metaDDL() string {
	return "CREATE TABLE " + w.s.metaTable() + " (\n    name TEXT NOT NULL,\n    value TEXT\n)"
}

func tableDDL(name string, cols []string) string {
	return "CREATE TABLE " + name + " (\n    " + strings.Join(cols, ",\n    ") + "\n)"
}

type enumValue struct {
	id          int
	name, label string
}

// enums are the ENUM_* tables a reader may join; values as nsys defines them.
var enums = []struct {
	table  string
	values []enumValue
}{
	{"ENUM_CUDA_MEMCPY_OPER", []enumValue{
		{0, "CUDA_MEMCPY_OPER_UNKNOWN", "Unknown"},
		{1, "CUDA_MEMCPY_OPER_HTOD", "Host-to-Device"},
		{2, "CUDA_MEMCPY_OPER_DTOH", "Device-to-Host"},
		{3, "CUDA_MEMCPY_OPER_HTOA", "Host-to-Array"},
		{4, "CUDA_MEMCPY_OPER_ATOH", "Array-to-Host"},
		{5, "CUDA_MEMCPY_OPER_ATOA", "Array-to-Array"},
		{6, "CUDA_MEMCPY_OPER_ATOD", "Array-to-Device"},
		{7, "CUDA_MEMCPY_OPER_DTOA", "Device-to-Array"},
		{8, "CUDA_MEMCPY_OPER_DTOD", "Device-to-Device"},
		{9, "CUDA_MEMCPY_OPER_HTOH", "Host-to-Host"},
		{10, "CUDA_MEMCPY_OPER_PTOP", "Peer-to-Peer"},
		{11, "CUDA_MEMCPY_OPER_UVM_HTOD", "Unified Host-to-Device"},
		{12, "CUDA_MEMCPY_OPER_UVM_DTOH", "Unified Device-to-Host"},
		{13, "CUDA_MEMCPY_OPER_UVM_DTOD", "Unified Device-to-Device"},
	}},
	{"ENUM_CUDA_MEM_KIND", []enumValue{
		{0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"},
		{1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"},
		{2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"},
		{3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"},
		{4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"},
		{5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"},
		{6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"},
		{7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"},
	}},
	{"ENUM_NSYS_EVENT_TYPE", []enumValue{
		{34, "NvtxMark", "NVTX Mark"},
		{39, "NvtxThread", "NVTX Thread"},
		{59, "NvtxPushPopRange", "NVTX PushPop Range"},
		{60, "NvtxStartEndRange", "NVTX StartEnd Range"},
		{75, "NvtxDomainCreate", "NVTX Domain Create"},
	}},
	{"ENUM_CUDA_KERNEL_LAUNCH_TYPE", []enumValue{
		{0, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"},
		{1, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Cooperative single device"},
		{2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Cooperative multi device"},
	}},
}
