"""The cost table of a target: the price, in cycles of one core, of one unit of each cost feature."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostTable:
    """Cycle estimates for one core (Zen 5 class): the price of one unit of each cost feature.

    Each float field names a feature (synth/cost.py: a feature's count times its price is the cycles it
    takes in its port class; a node's cost is the overlap rule over its and its children's classes); its
    comment says what one unit is.
    """

    gl_line: float = 8.0  # a 64-byte line read from (or written back to) main memory (~33 GB/s at ~4.5 GHz)
    # A main-memory line read as one of several interleaved streams (the B columns of a dot kernel), on top
    # of its gl_line: the prefetchers keep up with one sequential stream, not with several. 1x2048x16384
    # bf16 on Zen 4, one thread: one column at a time 26.8 GB/s (a plain read sweep 28.1), 2 or 4
    # interleaved 12.5-16 GB/s, and as bad for short columns (K = 256: 24 vs 9 GB/s).
    # An adjustment, not a price: a calibration may make it negative (tools/fit.py STREAM_ROWS), never below
    # -gl_line; then the refunds of lines read as streams and the search's bound take the least line price
    # (least_gl_line, l1_reuse_stream_line).
    gl_interleaved: float = 8.0
    # A main-memory line read as one of two interleaved streams of separate operands (one column of the
    # gated pair's B1 beside one of B2), on top of its gl_line; instead of gl_interleaved. Zen 4 showed two
    # streams as slow as four (above); a Zen 3 core reads two at least at the speed of one (microarch.py;
    # calibrate's dot loops there: 4.3 against 5.2 ns a line). An adjustment, as gl_interleaved.
    gl_two_streams: float = 8.0
    # A run shorter than a page (page_bytes) that a loop starts in main-memory weights, away from the
    # previous trip's runs: the prefetchers give up at the page edge, so its first lines wait for DRAM.
    # 1x2048x16384 bf16 KxN on Zen 4, one thread: 512-byte row runs 32 KiB apart (a 256-column C tile in
    # registers) read 10.6 GB/s, ~110 cycles lost per run; 8 rows side by side in 8 KiB runs 22 GB/s; sweep 28.5.
    gl_short_run: float = 100.0
    # A line of a long burst: a loop that reads several rows of main-memory weights side by side (at most
    # prefetch_streams), stepping along them, reads each trip's piece of each row in one burst (the register
    # tile's columns); the lines of a piece past stream_burst_bytes cost this more (loops.long_bursts).
    # 1x2048x16384 bf16 K x N on Zen 4, one thread, 8 rows side by side (bench/experiments/kxn_tiles.cpp):
    # 256-column register tiles (512-byte pieces) 0.70-0.78 of a read sweep, 128 or 64 columns 0.78-0.89, and
    # 256 columns with each row read in 128-byte slices 0.78-0.86: ~2.8 cycles per line past 256 bytes. A bare
    # read of 8 streams in bursts of 64 bytes to 2 KiB (with or without the widening FMAs) shows no such
    # penalty, so it comes with the register tile's loop, not from the prefetchers (the mechanism is not
    # established); `calibrate` does not measure it. Where a CPU lacks it, the
    # shorter tiles it prefers cost ~0.5% more by the rest of the model (loop trips).
    gl_burst_line: float = 3.0
    l1_line: float = 0.5  # a line brought in from L1 (a copy's source or a view already in L1)
    l2_line: float = 2.0  # a line from L2: copied or viewed from an L2 view, or a scratch block's line leaving L1
    # A line a kernel's vector loads stream from an L2 view, beyond the L1 load itself: the prefetchers
    # fetch a sequential panel ahead of the loads and the transfer overlaps the FMAs. (2048^3, serial: 6x64
    # kernels streaming 256 KiB B panels from L2 ran 115 ms; B packed per block into L1, 128 ms.)
    l2_stream: float = 0.25
    vec_load: float = 0.5  # one vector load (or broadcast) from L1
    vec_store: float = 1.0  # one vector store (a memory tile's zeroing: one per line)
    vec_fma: float = 0.5  # one vector FMA (two FMA pipes)
    vec_op: float = 0.35  # one vector logic op, add, shift, abs / sign or convert (the ALU pipes: 3 or 4 of them)
    # One vector shuffle, permute, unpack, 128-bit insert / extract or broadcast from a register (256 bits or less:
    # the kernels that count it issue ymm instructions): the shuffle pipes, fewer than the ALU's (Intel: port 5
    # alone for lane-crossing ones and broadcasts; Zen 3/4: FP1 and FP2, which also shift; microarch.py).
    vec_shuffle: float = 0.5
    # One vector integer multiply (256 bits or less): maddubs, madd, mullo, VNNI's vpdpbusd (Intel: ports 0 and 1;
    # Zen 3/4: FP0 and FP3; microarch.py).
    vec_imul: float = 0.5
    vec_zero: float = 0.25  # zeroing one register
    scalar_op: float = 1.0  # one scalar load, store or multiply-add
    hsum: float = 6.0  # horizontal sum of one vector
    fma_latency: float = 4.0  # an outer-product step bound by FMA latency (see cost.fma_steps)
    copy_elem: float = 0.3  # one element of a packing copy (compiler-vectorized loop); zeroing memory: half
    # One element of a packing copy whose innermost loop reads its source at a stride (A interleaved into
    # evens and odds, a transposed tile): a scalar load and store each, not vectorized. Zen 4, warm: a
    # 1x2048x4096 bf16 GEMV that copied A (2048 floats, evens then odds) for each column ran 2,600 cycles a
    # column against 460 with one copy in all. `calibrate` measures it (tools/fit.py "copy_gather"): 2.2 on an
    # Emerald Rapids VM.
    copy_gather_elem: float = 1.0
    loop_iter: float = 1.0  # one iteration of a rolled loop
    parallel_setup: float = 4000.0  # one parallel loop: waking workers and joining them
    # A line of an output that parallel tasks share at a tile edge (one per strided run of a task's output
    # tile): the prefetchers of one core pull the neighbour's lines of the same rows, and stores bounce them
    # between the cores (measured on 256^3: column blocks per thread ran 25% slower than row blocks).
    shared_line: float = 200.0
    # A main-memory line at the machine's aggregate read bandwidth: cycles (of one core) per line while every core
    # reads. No node counts it: the threads of a parallel loop each read main memory up to P x this / gl_line
    # times slower than alone (cost.contention). 0: unknown, no slowdown (the built-in tables: a machine's memory
    # channels, not its cores, set it). `calibrate` measures it (tools/fit.py: dram_line_all over the threads that
    # read). Emerald Rapids VM with 16 vCPUs: 1.92 (a line of one thread alone: 13.7).
    gl_line_shared: float = 0.0

    page_bytes: int = 4096  # the prefetchers' horizon (gl_short_run); a parameter, not a price
    # Sequential streams the hardware prefetchers follow side by side (cost.lost_streams); a parameter, not a
    # price. Measured on Zen 3 (1x2048x4096 bf16 K x N GEMVs reading 8 rows side by side ran 1.8x faster
    # than 16 rows, 5x faster than 32 or 64); no public figure for AMD. Intel's L2 streamer tracks 32 streams
    # (one per 4 KiB page and direction; optimization manual, "Data prefetching"): `calibrate` should measure it.
    prefetch_streams: int = 8
    # The longest piece of each of several rows read side by side that costs no gl_burst_line; a parameter, not
    # a price; 0: no limit. Zen 4 (above): 256-byte pieces read at full speed, 512 did not.
    stream_burst_bytes: int = 256
    # How far ahead (bytes) the dot kernels (plain and the pair's) prefetch a B column they stream from main memory,
    # one prefetch per line (a vec_load each); 0: none. A parameter, not a price. One stream's lead: a kernel
    # reading n columns side by side prefetches each 1/n as far ahead (dot.prefetch_offsets). The pair's loop
    # spends ~24 instructions per 128 bytes of B1 and B2, so the out-of-order window runs only ~1 KiB ahead of the loads
    # and the hardware prefetchers alone leave it short of a read sweep. 1x2560x10240 bf16 on Zen 3, one
    # thread, same-run medians: 0.93-0.97 of the sweep without, 1.00-1.02 with 256 to 1024 bytes, 0.94 with
    # 4 KiB; the same loads without the arithmetic, 1.13. A plain bf16 GEMV (1x2048x16384, one column per kernel):
    # 0.79 of the sweep without, 0.85 with 512 bytes (same process, loaded host).
    prefetch_bytes: int = 512
    # How far ahead (bytes) the kernels that prefetch the next kernel's columns into L2 (quant_int_prefetch.step_slots)
    # run at least: where a kernel's columns are fewer bytes, they prefetch columns further on. A parameter, not a
    # price. One i8 column of 2048 values per kernel (1x2048x16384 from DRAM, one thread, Emerald Rapids VM,
    # interleaved rounds of one process): prefetched 2 KiB ahead 0.81 of a read sweep, 4 KiB ahead 1.00 (of a
    # sweep that read ~15% slower than the bench's: bench/README.md, "The harness's read sweep was slow").
    stream_lead_bytes: int = 4096
    # Instructions the front end dispatches per cycle (the port rule's dispatch class, cost.parts); a
    # parameter, not a price. Zen 4 renames 6 macro-ops per cycle [microarch.py: AMD19-4].
    dispatch: int = 6
    # Pipes that every vector instruction (FMA, ALU op, shuffle, integer multiply) shares; 0: no shared
    # limit, the classes count apart. A parameter, not a price. On Intel cores with 512-bit vectors only
    # ports 0 and 5 execute them (port 1's vector ALU is fused into port 0's 512-bit unit): a kernel's FMAs,
    # shifts and permutes queue for the same two pipes (cost.parts' "vector" class).
    vec_pipes: int = 0
    # Percent of the work beyond the busiest port class (or the L1 ports + transfers) that the core hides
    # behind it (cost.overlap): 100 is ECM's full overlap, 0 the additive model. A parameter, not a price.
    # Measured (bench/RANK.md, Zen 3, the instrument's timings priced again): full overlap makes 22 of 30
    # 256^3 candidates cost alike (FMA-bound) while they run 1.00-1.55x; at 50 the ranking of both the
    # additive model's candidates and the overlap's is at least the additive model's, and the k step and
    # GEMVs still cost nearly their busiest port.
    overlap_percent: int = 50
    # Percent of one task by which the slowest thread of a parallel loop finishes after the others (a vCPU the host
    # runs less, a core at a lower clock): the busiest thread runs ceil(tasks / threads) tasks and up to this share of
    # one more (loops.lateness, cost.loop_weights), so finer tasks, handed out dynamically, shrink it. A parameter,
    # not a price. 0: threads alike (the built-in tables). `calibrate` measures it (tools/fit.py TAIL_ROWS). A 16-vCPU
    # Emerald Rapids VM: 107 (one vCPU at half speed); the flagship GEMV ran 1.37x faster from DRAM in 128 tasks than
    # in 16 on 16 threads, and with 107 the search's programs ran 1.08-1.32x faster there than without (SCALING.md).
    tail_percent: int = 0
    tail_threads: int = 0  # the threads tail_percent was measured on (loops.lateness); 0: as many as a loop runs

    @property
    def hidden(self) -> float:
        """The share of the non-binding work the core hides (``overlap_percent`` / 100)."""
        return self.overlap_percent / 100

    @property
    def least_gl_line(self) -> float:
        """The least a main-memory line costs: gl_line, less the largest saving of a stream adjustment
        (gl_interleaved, gl_two_streams: negative where a core reads such streams faster, as calibrated or measured)."""
        return self.gl_line + min(0.0, self.gl_interleaved, self.gl_two_streams)

    @property
    def l1_reuse_line(self) -> float:
        """A line counted as a main-memory line in a loop's body that the loop's later trips find in L1
        (cost.l1_reuse_lines): a refund, the difference of the two prices (negative). For lines no kernel
        reads as one of several streams (A, C, weights stored K x N): they were charged gl_line."""
        return self.l1_line - self.gl_line

    @property
    def l2_reuse_line(self) -> float:
        """A line counted as a main-memory line in a loop's body that the loop's later trips read from
        L2 instead (cost.l2_reuse_lines): a refund, the difference of the two prices (negative), as
        l1_reuse_line."""
        return self.l2_line - self.gl_line

    @property
    def l1_reuse_stream_line(self) -> float:
        """l1_reuse_line of a line the body's kernels may have read as one of several streams (weights stored
        N x K: the dot kernels' columns), charged gl_line plus a stream adjustment that a calibration may make
        negative: refunded from the least main-memory price, so that no line read again costs less than
        l1_line (cost.bound_parts relies on it). Pricing every refund so overcharged the L1 and L2 reuse of
        GEMM blockings by the adjustment: on the Zen 3 VM, with a calibration's -4.0, the instrument's rho
        on 256^3 fell from 0.82 to 0.75 (bench/RANK.md)."""
        return self.l1_line - self.least_gl_line

    @property
    def l2_reuse_stream_line(self) -> float:
        """l2_reuse_line of a line read as one of several streams, from the least price (l1_reuse_stream_line)."""
        return self.l2_line - self.least_gl_line
