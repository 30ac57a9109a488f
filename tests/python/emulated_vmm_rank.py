"""One rank of tests/python/test_emulated_driver_ctypes.py: the seed's exchange
as a program using the driver's VMM API through ctypes would run it (what
cuda-python does underneath), over whatever libcuda.so.1 the library path
finds. Creates a FABRIC allocation, fills it, exports the 64-byte handle,
gathers every rank's handle through files in a shared directory, imports and
maps every peer's, reads each through the mapping and checks the fill.

    emulated_vmm_rank.py EXCHANGE_DIR
"""

import ctypes
import os
import pathlib
import sys
import time

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_FABRIC = 8
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CHECKED_BYTES = 65536


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


def fill(rank, n):
    return bytes((rank * 37 + i * 13 + 1) & 0xFF for i in range(n))


def wait_for(paths, what):
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank timed out waiting for {what}")
        time.sleep(0.01)


def main():
    cu = ctypes.CDLL("libcuda.so.1")

    def check(result, call):
        if result != 0:
            name = ctypes.c_char_p()
            cu.cuGetErrorName(result, ctypes.byref(name))
            raise SystemExit(f"{call} failed: {name.value.decode() if name.value else result}")

    exchange = pathlib.Path(sys.argv[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    check(cu.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(device), int(os.environ.get("LOCAL_RANK", "0"))), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    prop = AllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED, requestedHandleTypes=CU_MEM_HANDLE_TYPE_FABRIC,
                          location=Location(CU_MEM_LOCATION_TYPE_DEVICE, device.value))
    granularity = ctypes.c_size_t()
    check(cu.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), 0),
          "cuMemGetAllocationGranularity")
    size = granularity.value
    access = AccessDesc(location=Location(CU_MEM_LOCATION_TYPE_DEVICE, device.value),
                        flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE)

    # Create, map, fill, export.
    mine = ctypes.c_ulonglong()
    check(cu.cuMemCreate(ctypes.byref(mine), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0)),
          "cuMemCreate")
    base = ctypes.c_ulonglong()
    check(cu.cuMemAddressReserve(ctypes.byref(base), ctypes.c_size_t(size * world), ctypes.c_size_t(0),
                                 ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
    own = base.value + rank * size
    check(cu.cuMemMap(ctypes.c_ulonglong(own), ctypes.c_size_t(size), ctypes.c_size_t(0), mine, ctypes.c_ulonglong(0)),
          "cuMemMap")
    check(cu.cuMemSetAccess(ctypes.c_ulonglong(own), ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
          "cuMemSetAccess")
    data = fill(rank, CHECKED_BYTES)
    check(cu.cuMemcpyHtoD_v2(ctypes.c_ulonglong(own), data, ctypes.c_size_t(len(data))), "cuMemcpyHtoD")
    handle = (ctypes.c_ubyte * 64)()
    check(cu.cuMemExportToShareableHandle(handle, mine, CU_MEM_HANDLE_TYPE_FABRIC, ctypes.c_ulonglong(0)),
          "cuMemExportToShareableHandle")
    (exchange / f"handle.{rank}.tmp").write_bytes(bytes(handle))
    os.rename(exchange / f"handle.{rank}.tmp", exchange / f"handle.{rank}")

    # Gather, import, map, read.
    wait_for([exchange / f"handle.{r}" for r in range(world)], "the handles")
    imported = []
    for peer in range(world):
        if peer == rank:
            continue
        peer_handle = (ctypes.c_ubyte * 64).from_buffer_copy((exchange / f"handle.{peer}").read_bytes())
        allocation = ctypes.c_ulonglong()
        check(cu.cuMemImportFromShareableHandle(ctypes.byref(allocation), peer_handle, CU_MEM_HANDLE_TYPE_FABRIC),
              "cuMemImportFromShareableHandle")
        at = base.value + peer * size
        check(cu.cuMemMap(ctypes.c_ulonglong(at), ctypes.c_size_t(size), ctypes.c_size_t(0), allocation,
                          ctypes.c_ulonglong(0)), "cuMemMap")
        check(cu.cuMemSetAccess(ctypes.c_ulonglong(at), ctypes.c_size_t(size), ctypes.byref(access),
                                ctypes.c_size_t(1)), "cuMemSetAccess")
        imported.append(allocation)
        if ctypes.string_at(at, CHECKED_BYTES) != fill(peer, CHECKED_BYTES):
            raise SystemExit(f"rank {rank}: peer {peer}'s shard differs from its fill")
    (exchange / f"read.{rank}").write_text("ok")
    # Every peer has read this rank's memory before it goes.
    wait_for([exchange / f"read.{r}" for r in range(world)], "every rank's reads")
    check(cu.cuMemUnmap(ctypes.c_ulonglong(base.value), ctypes.c_size_t(size * world)), "cuMemUnmap")
    for allocation in imported + [mine]:
        check(cu.cuMemRelease(allocation), "cuMemRelease")
    check(cu.cuMemAddressFree(ctypes.c_ulonglong(base.value), ctypes.c_size_t(size * world)), "cuMemAddressFree")
    print(f"rank {rank}: read {world - 1} peers' shards through FABRIC handles: OK", flush=True)


if __name__ == "__main__":
    main()
