/* Creation, destruction and the error check of the CUDA communicator (core/backend.h's
 * comm_create, comm_destroy, comm_check); the region layout is in comm_state.h.
 *
 * Creation is collective and fails alike on every rank. Each rank allocates its region on its
 * device, zeroes the flags and the error word, takes an IPC handle of it, and sends one record
 * (a magic and record version, world size, rank, capacity, device, its SM count and UUID, process
 * id, the region's address in its own process, the IPC handle, whether its steps so far succeeded)
 * through the caller's exchange. Every rank then sees the same W records and applies the same
 * checks (magic, world size, capacity, ranks in order, every rank ready), so all fail or none, and
 * derives the same grid bound (grid_bound: every rank must launch the same grids, all of whose
 * blocks fit at once). It opens each peer's region: with cudaIpcOpenMemHandle when the peer is
 * another process (a peer on the same GPU included), directly by address when it is a thread of
 * this process (IPC cannot open a handle of its own process), enabling peer access when that
 * peer's device is another GPU. Since opening can fail on one rank only, a second exchange shares
 * each rank's outcome and every rank fails if any did.
 *
 * "This process" is the pid together with a random per-process token (ranks in separate PID
 * namespaces may share a pid). Every rank also says whether it was given an nccl_comm: AUTO must
 * pick alike on every rank, so a difference fails creation. A rank that cannot use its device still
 * joins the exchange (not ready), so its peers fail instead of waiting in the caller's all-gather.
 *
 * comm_check synchronizes the device and reads the error word; a recorded failure stays (the word
 * keeps later kernels inert, and the host refuses later calls): the ranks are out of step. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda/comm/comm_state.h"
#include "cuda/common/cuda_common.cuh"

enum { RECORD_MAGIC = 0x49474e53, RECORD_VERSION = 1 };

/* One rank's record in the exchange (plain bytes: every rank of a host runs the same build). */
typedef struct {
  uint32_t magic, version;
  int32_t world_size, rank, device, pid, ready;
  int32_t sm_count, has_nccl;
  uint64_t process_token; /* with pid: the same process (ranks in separate PID namespaces may share a pid) */
  unsigned char gpu_uuid[16]; /* which physical GPU, whatever the ordinal in each process */
  uint64_t capacity;
  uint64_t region_address;
  cudaIpcMemHandle_t handle;
} setup_record;

/* A random number fixed for this process's lifetime (0 if the system gives none). */
static uint64_t process_token(void) {
  static uint64_t token = 0;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] {
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
      if (fread(&token, sizeof token, 1, f) != 1)
        token = 0;
      fclose(f);
    }
  });
  return token;
}

static void release(ignis_cuda_comm *c) {
  for (int s = 0; s < c->world_size; ++s)
    if (c->ipc_opened[s])
      cudaIpcCloseMemHandle(c->peer[s]);
  if (c->region)
    cudaFree(c->region);
  (void)cudaGetLastError();
  free(c);
}

/* Allocate the region, zero its flags and error word and take its IPC handle; 1 on success. */
static int make_region(ignis_cuda_comm *c, setup_record *mine) {
  if (cudaMalloc(reinterpret_cast<void **>(&c->region), c->region_bytes) != cudaSuccess) {
    c->region = nullptr;
    return 0;
  }
  if (cudaMemset(c->region, 0, COMM_DATA_OFFSET) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
    return 0;
  return cudaIpcGetMemHandle(&mine->handle, c->region) == cudaSuccess;
}

/* The same checks on every rank over the same records: NULL, or what is wrong. */
static const char *check_records(const setup_record *all, int32_t world_size, size_t capacity, int *culprit) {
  for (int s = 0; s < world_size; ++s) {
    *culprit = s;
    if (all[s].magic != RECORD_MAGIC || all[s].version != RECORD_VERSION)
      return "its record is not an ignis CUDA communicator record of this version";
    if (all[s].world_size != world_size)
      return "it gave another world_size";
    if (all[s].capacity != (uint64_t)capacity)
      return "it gave another capacity";
    if (all[s].rank != s)
      return "its rank does not match its position in the exchange (ranks must be distinct)";
    if (!all[s].ready)
      return "it could not use its device or allocate or share its region (host or device memory, CUDA IPC)";
    if (all[s].has_nccl != all[0].has_nccl)
      return "it gave an nccl_comm where rank 0 did not, or none where rank 0 did (AUTO would differ)";
  }
  return nullptr;
}

/* The most blocks of an all-reduce grid, the same on every rank: all blocks of every rank that
 * shares a GPU must be resident together (block b spins until its peers' block b arrives, and
 * threads of one process get no time slicing), so the fewest SMs of any rank divided by the most
 * ranks on one GPU, and at most COMM_MAX_BLOCKS. */
static int32_t grid_bound(const setup_record *all, int32_t world_size) {
  int32_t fewest_sms = COMM_MAX_BLOCKS, most_sharing = 1;
  for (int s = 0; s < world_size; ++s) {
    if (all[s].sm_count < fewest_sms)
      fewest_sms = all[s].sm_count;
    int32_t sharing = 0;
    for (int t = 0; t < world_size; ++t)
      sharing += memcmp(all[s].gpu_uuid, all[t].gpu_uuid, sizeof all[s].gpu_uuid) == 0;
    if (sharing > most_sharing)
      most_sharing = sharing;
  }
  const int32_t bound = fewest_sms / most_sharing;
  return bound > 0 ? bound : 1;
}

/* Map peer s's region into this process; 1 on success. */
static int open_peer(ignis_cuda_comm *c, const setup_record *peer, const setup_record *mine, int s) {
  if (peer->pid == mine->pid && peer->process_token == mine->process_token) {
    if (peer->device != c->device) {
      const cudaError_t err = cudaDeviceEnablePeerAccess(peer->device, 0);
      if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled)
        return 0;
      (void)cudaGetLastError();
    }
    c->peer[s] = reinterpret_cast<char *>((uintptr_t)peer->region_address);
    return 1;
  }
  void *mapped = nullptr;
  if (cudaIpcOpenMemHandle(&mapped, peer->handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess)
    return 0;
  c->peer[s] = static_cast<char *>(mapped);
  c->ipc_opened[s] = 1;
  return 1;
}

extern "C" ignis_status ignis_cuda_comm_create(const ignis_comm_create_params *p, void **state) {
  *state = nullptr;
  const int32_t world = p->world_size;
  if (world < 1 || world > IGNIS_COMM_MAX_WORLD || p->rank < 0 || p->rank >= world)
    return ignis_set_error(IGNIS_ERROR_INTERNAL,
                           "ignis_comm_create: world_size %d, rank %d reached the CUDA backend", (int)world,
                           (int)p->rank);
  /* A rank that cannot use its device or get host memory still takes part in the exchange, as not
   * ready, so that its peers fail too instead of waiting for it in the caller's all-gather. */
  ignis_device_guard guard(p->device);
  const cudaError_t device_status = guard.status;
  (void)cudaGetLastError();
  ignis_cuda_comm *c =
      device_status == cudaSuccess ? static_cast<ignis_cuda_comm *>(calloc(1, sizeof(ignis_cuda_comm))) : nullptr;
  setup_record all[IGNIS_COMM_MAX_WORLD];
  if (c) {
    c->world_size = world;
    c->rank = p->rank;
    c->device = p->device;
    c->capacity = p->capacity;
    c->capacity_bytes = (p->capacity + 255) / 256 * 256;
    c->region_bytes = ignis_cuda_comm_region_bytes(c->capacity_bytes);
    c->nccl_comm = p->nccl_comm;
    const double ns = p->timeout_s * 1e9;
    c->timeout_ns = ns >= 1.8e19 ? UINT64_MAX : (uint64_t)ns;
  }

  setup_record mine;
  memset(&mine, 0, sizeof mine);
  mine.magic = RECORD_MAGIC;
  mine.version = RECORD_VERSION;
  mine.world_size = world;
  mine.rank = p->rank;
  mine.device = p->device;
  mine.pid = (int32_t)getpid();
  mine.process_token = process_token();
  mine.has_nccl = p->nccl_comm != nullptr;
  mine.capacity = p->capacity;
  mine.sm_count = device_status == cudaSuccess ? ignis_cuda_sm_count(p->device) : 0;
  cudaDeviceProp properties;
  if (device_status == cudaSuccess && cudaGetDeviceProperties(&properties, p->device) == cudaSuccess)
    memcpy(mine.gpu_uuid, properties.uuid.bytes, sizeof mine.gpu_uuid);
  mine.ready = c ? make_region(c, &mine) : 0;
  mine.region_address = c ? (uint64_t)(uintptr_t)c->region : 0;
  (void)cudaGetLastError();

  ignis_status status = IGNIS_OK;
  int culprit = 0;
  const char *problem = nullptr;
  if (p->exchange(&mine, all, sizeof mine, p->user) != 0) {
    status = ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "ignis_comm_create: the exchange failed on rank %d", (int)p->rank);
  } else if (device_status != cudaSuccess) {
    status = ignis_set_error(IGNIS_ERROR_CUDA, "ignis_comm_create: rank %d cannot make cuda:%d current: %s",
                             (int)p->rank, (int)p->device, cudaGetErrorString(device_status));
  } else if ((problem = check_records(all, world, p->capacity, &culprit)) != nullptr) {
    status =
        ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_comm_create: rank %d: %s", culprit, problem);
  } else { /* every rank was ready: c exists */
    c->max_blocks = grid_bound(all, world);
    int32_t opened = 1;
    for (int s = 0; s < world; ++s)
      if (s == p->rank)
        c->peer[s] = c->region;
      else if (opened && !open_peer(c, &all[s], &mine, s))
        opened = 0;
    (void)cudaGetLastError();
    int32_t outcomes[IGNIS_COMM_MAX_WORLD];
    if (p->exchange(&opened, outcomes, sizeof opened, p->user) != 0) {
      status = ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "ignis_comm_create: the exchange failed on rank %d", (int)p->rank);
    } else {
      for (int s = 0; s < world && status == IGNIS_OK; ++s)
        if (!outcomes[s])
          status = ignis_set_error(
              IGNIS_ERROR_CUDA,
              "ignis_comm_create: rank %d could not map a peer's region (CUDA IPC or peer access)", s);
    }
  }
  if (status != IGNIS_OK) {
    if (c)
      release(c);
    return status;
  }
  *state = c;
  return IGNIS_OK;
}

extern "C" void ignis_cuda_comm_destroy(void *state) {
  if (!state)
    return;
  ignis_cuda_comm *c = static_cast<ignis_cuda_comm *>(state);
  ignis_device_guard guard(c->device);
  release(c);
}

extern "C" ignis_status ignis_cuda_comm_check(void *state) {
  ignis_cuda_comm *c = static_cast<ignis_cuda_comm *>(state);
  IGNIS_CUDA_ON_DEVICE(c->device);
  IGNIS_CUDA_CHECK(cudaDeviceSynchronize());
  uint32_t recorded = 0;
  char *word = c->region + COMM_ERROR_OFFSET;
  IGNIS_CUDA_CHECK(cudaMemcpy(&recorded, word, sizeof recorded, cudaMemcpyDeviceToHost));
  if (recorded == 0)
    return IGNIS_OK;
  /* Kept, not cleared: the ranks' epochs no longer agree, so a later call could pass a barrier on a
   * stale flag and read a peer's old data. The kernels stay inert while the word is set, and the
   * host refuses further calls (ignis_cuda_allreduce). */
  c->failed = (int32_t)recorded;
  if (recorded == (uint32_t)IGNIS_ERROR_TIMEOUT)
    return ignis_set_error(
        IGNIS_ERROR_TIMEOUT,
        "ignis_comm_check: rank %d: an all-reduce kernel gave up waiting for its peers after "
        "%.3g s (its outputs are unspecified)",
        (int)c->rank, (double)c->timeout_ns * 1e-9);
  return ignis_set_error((ignis_status)recorded,
                         "ignis_comm_check: rank %d: an all-reduce kernel recorded %s", (int)c->rank,
                         ignis_status_string((ignis_status)recorded));
}
