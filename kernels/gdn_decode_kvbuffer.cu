// gdn_decode_kvbuffer / gdn_decode_direct: KVBuffer decode of Gated DeltaNet, one token per request.
//
// Math (kvbuffer-math.md sections 2, 3, 4, 7), per value head, in the serving layout (row v of S0):
// the request holds n = fill buffered tokens j = 0..n-1 with cumulative log decays G_j since the
// checkpoint S0; the new token t has G_t = G_{n-1} + g (G_{-1} = 0).
//   a_v = S0[v,:].k_t,  b_v = S0[v,:].q_t                  (one read of the row; 0 in direct mode)
//   c_j = e^{G_t-G_j} (k_j.k_t),  d_j = e^{G_t-G_j} (k_j.q_t)          (per block, over K)
//   u_t[v] = beta (v_v - e^{G_t} a_v - sum_j c_j u_j[v])
//   o_v    = e^{G_t} b_v + sum_j d_j u_j[v] + (k_t.q_t) u_t[v]
// cached-u: u_j[v] read from the buffer.  raw: the buffer holds v_j, beta_j; per row the u_j are
// recomputed by the unit lower-triangular forward substitution
//   u_j[v] = beta_j (v_j[v] - e^{G_j} S0[v,:].k_j) - sum_{i<j} beta_j e^{G_j-G_i} (k_i.k_j) u_i[v].
// Append entry n = (k_t, u_t or v_t, G_t[, beta]). When n + 1 == C, fold in the same kernel (the
// S0 row is already in registers) and empty the buffer:
//   S0[v,:] <- e^{G_t} S0[v,:] + sum_{j<n} e^{G_t-G_j} u_j[v] k_j + u_t[v] k_t
// Direct mode (has_state == 0): no S0 read; the fold creates the state and sets has_state.
// Every exponent is G_t - G_j <= 0: no exp(-G), nothing overflows (section 2).
//
// Layouts (kernels/kvbuffer_layout.h): S [slots, HV, V, K] fp32 K contiguous, in place;
//   buf_k [slots, C, H, K] E; buf_val [slots, C, HV, V] E; buf_gcum, buf_beta [slots, C, HV] fp32;
//   fill, has_state, done_count [slots] int32; token I/O as gdn_decode_recurrent.
// Races: blocks of one request (value heads x V tiles) read fill/has_state at entry; the last of
// them to finish (atomic count in done_count) advances them, so no block sees another's update
// within a launch. With scheduler metadata (row_fill, row_has_state: step inputs per row, as a
// serving engine passes sequence positions to every layer) nothing is advanced in kernel: no
// atomics, and the fill is known one dependent load earlier. Entry n is written by this launch
// and only entries < n are read.
// Work split: block = (row, value head, tile of rows_per_block rows), 128 threads = 16 groups of 8
// lanes, one row per group per 16-row chunk. S0 rows arrive by bulk copies (as in
// gdn_decode_recurrent) started as soon as has_state is known; the buffered keys [n, K], the u tile
// [n, rows] and G_j reach shared memory in the same round trip (cp.async); per-block scalars
// (c_j, d_j, decays) come from shared memory. The token's k and q stay unnormalised in registers;
// their scales multiply the few sums that use them. Dynamic shared memory (single kernel): the S0
// tile at offset 0 (128-byte aligned), the buffer staging, then the per-row arrays (barriers, v,
// outputs, appended entries) at an offset the host computes. C is a runtime value (1..64): only
// buffer sizes and trip counts depend on it. Templates: K = V in {64, 128}, entry type E in
// {bf16, fp32}, variant {cached-u, raw}.
//
// Two launch shapes (GdnKVBufferParams::path), same math and layouts:
//   single: the kernel below, one block per (row, value head, V tile) does everything.
//   split: kernels A and B below (cached-u, scheduler row metadata and `scratch` only: the split
//     kernels have no in-kernel fill advance). Path Auto picks split by measurement (H200, 9a2eb43,
//     log v5b): from batch kSplitMinBatch = 8 (at batch 1 the second launch costs more than it
//     saves), for gdn_decode_direct from C = 4 (direct 256: 60.5 us [C=8] against 120.4 [C=4];
//     at C = 1 every row folds and the single kernel wins), for gdn_decode_kvbuffer only at
//     C = 64 (64: 78.0 against 83.4 us): with states, at the best C (4-8) the single kernel is
//     faster (256: 173.6 against 184.2), because B's blocks, which the whole S0 read passes
//     through, live as long as the single kernel's while A adds ~19 us (ncu) before B can finish.
//     Everything else (raw variant, pool fill counters, no scratch) runs the single kernel.
//   Capacity 1 (Auto, scheduler row metadata): no token outlives its step (fill is 0 before every
//     step and every step folds), so the step is the recurrent update of S0 in place; the dispatch
//     runs gdn_decode_recurrent's kernels on the state pool, with S0 = 0 and no read where
//     row_has_state is 0 (log v20), or, when the scheduler promises every_row_has_state, the plain
//     recurrent kernels without that per-row load (log v29). The buffer pools are not touched.
//   The split kernels:
//     kernel A per (row, key head) stages the n buffered keys, G_j and u_j rows once for the R
//     value heads sharing the key head, computes c_j, d_j (groups of lanes over j in parallel)
//     and r_v = sum_j c_j u_j[v], s_v = sum_j d_j u_j[v] per value head into scratch [B, HV, 2, V]
//     fp32, and finishes direct-mode tokens that do not fold (no state, nothing for kernel B).
//     Kernel B, shaped like gdn_decode_recurrent (same tiles, bulk copies, all chunks in flight),
//     streams S0 rows for rows with a state or a fold: a_v, b_v, then
//       u_t[v] = beta (v_v - e^{G_t} a_v - r_v),  o_v = e^{G_t} b_v + s_v + (k_t.q_t) u_t[v],
//     appends u_t, and writes S0 only when the request folds (fold inside B: the folding blocks,
//     1/C of the requests when fills are staggered, stage the keys and their u tile to shared
//     memory by cp.async, which every B block reserves: C K e + C (rows + 8) e bytes; a third
//     launch would cost one more dependent launch gap, ~2 us per layer, and a grid over every
//     row for work that is 1/C of them). B is launched with programmatic dependent launch: A
//     triggers at entry, B starts its S0 copies while A's last wave runs and waits
//     (griddepcontrol.wait) only before reading scratch.
//
// Performance log (H200, 36 layer pools in one CUDA graph, Qwen3-Next shapes H=16 HV=32 K=V=128,
// per layer, median, at the best C; targets: >= 1.7x recurrent at batch 256, never slower than
// recurrent at batch 1, ReplaySSM 7.5 / 45.7 / 161 / 316 us at batch 1 / 64 / 256 / 512):
//   v1 (d48b046) register streaming like recurrent v1. Predicted ~1.8x at C = 16 (2.2 MiB against
//     4 MiB per request). Measured at 256: C=4 206.6 us (1.38x), C=16 225 us (63% of copy);
//     batch 1 4.79 us (recurrent 3.94). Missed: direct mode, with almost no bytes, still took 158 us
//     at batch 256 C=4, so the time was not bytes but each block's chain of dependent loads
//     (slot -> fill -> G -> a serial loop over keys -> a serial u-tile loop -> rows, one v load per
//     chunk) with 4 resident blocks per SM.
//   v2 (3a6d77a) S0 through bulk copies: 256 C=4 209.7 (1.30x): no gain, the chain dominates.
//   v3 (56a8e3e) fill/has_state as scheduler row metadata (no atomic, fill known with the slot),
//     v staged once, u tile by 16-byte loads. Predicted batch 1 at recurrent level, large batch
//     +20%. Measured: batch 1 3.99 (= recurrent), 256 C=4 188.7 (1.44x); direct C=64 still 287 us.
//   v4 (1221994) keys, u tile and G_j in one cp.async round trip, dots from shared memory.
//     Predicted: C=16 at 256 toward the bytes limit (~150 us, 1.8x). Measured (results/
//     decode_h200.csv): batch 1 4.01 us [C=1] (recurrent 3.92), 32 28.97 [4] (1.30x), 64 50.03
//     [4] (1.42x), 128 93.5 [8] (1.47x), 256 177.2 [8] (1.53x; C=16 186.5), 512 346.4 [8]
//     (1.55x). Missed 1.7x: at C=8 the kernel moves 83% of copy bandwidth where recurrent moves
//     94%, and the best C is 4-8, not the bytes optimum ~16, because every buffered entry costs
//     more time than its bytes (per-block staging and dot products over n keys repeated by the
//     2 V-tiles and the 2 value heads of a key head, smem footprint limiting residency to 3-5
//     blocks/SM). Next: a persistent grid that prefetches the next (request, head) item's S0 tile
//     and buffer while computing the current one, and one block per key head (both value heads)
//     to share the key staging; direct-only launches without the S0 tile in shared memory.
//   Direct mode (same kernel, has_state = 0): batch 64: 32.5 us at C=2 (0.46x recurrent), 64.4 us
//     at C=64 (0.91x): missed the 0.5x at C=64 for the same chain/residency reason.
//   v5 split path (kernels A + B above; single kernel kept at batch 1). Predicted, written before
//     measuring: at 256, C = 16: B reads S0 (512 MiB) at ~4.3-4.4 TB/s read-only ~122-125 us,
//     + fold writes 1/16 (~8 us) + A mostly hidden under B (~4.4 waves of A blocks, only the last
//     overlapped: ~8-12 us exposed) -> ~140-150 us (1.8x, under ReplaySSM's 161); best C 16-32.
//     64: ~42-47 us (ReplaySSM 45.7); 512: ~280-300 us (316). Direct, C = 64, batch 256: A reads
//     ~100 MB of entries with ~3 DRAM round trips per block, B only folds 1/64 of the rows:
//     ~30-40 us (~0.13x recurrent); batch 64 ~12-15 us (~0.2x). Batch 8: unclear (two launches
//     against a latency-bound single kernel); the sweep measures both (kvbuffer vs
//     kvbuffer-single).
//     Measured (eaec21f, one sweep, kvbuffer = split from batch 8): tests 78/78, memcheck and
//     racecheck clean. kvbuffer split was SLOWER than single at every batch >= 8: 256: 219.5 us
//     [C=8] against 174.1 [C=4]; 64: 62.0 against 50.0. direct split was faster from batch 8:
//     256: 77.8 [8] against 120.0 [4]; 64: 24.6 [8] against 32.8 [4]; but C=64 at 64 was 83.4 us.
//     ncu (serialised kernels, 256, C=8): A 19.1 us (8 blocks/SM, DRAM 15%), B 209 us (DRAM
//     61%), single 169.7 us (DRAM 76%); direct 64, C=64: A 19.2 us, B 91 us at 0.2% DRAM. So A
//     was as predicted and B was the miss: its folding blocks read keys and u_j from global
//     memory once per row and key (a chain of L2-latency loads, ~700 cycles per key) and held
//     their slots for tens of us.
//   v5b: B stages the fold's keys and u tile by cp.async (as the single kernel does). Predicted:
//     B at 256, C=8 from 209 to ~150 us (S0 read + 1/8 write at ~4 TB/s), split ~160-170 us
//     (1.6-1.7x); direct C=64 at 64: folding blocks from 91 us to a few us, B's early exits now
//     at 3 blocks/SM (57 KiB reserved) ~15 us: ~35-40 us (0.5-0.55x recurrent).
//     Measured (9a2eb43, results/decode_h200.csv, kvbuffer and direct = split from batch 8):
//     tests 78/78, memcheck and racecheck clean. kvbuffer split 256: 184.2 us [C=8] (was 219.5;
//     single 173.6 [4]), 64: 52.0 [8] (single 50.0 [4]), 512: 359.6 [8] (single 340.2 [8]);
//     split wins only at C = 64 (8/32/64/128: 16.0/43.2/78.0/144.1 against 17.2/48.3/83.4/
//     154.2). Direct split: 8: 7.11 [16] (single 9.06 [1]), 64: 20.2 [8] (0.28x recurrent),
//     256: 60.5 [8] (0.22x), 512: 113.5 [8]; C = 64: 64: 40.4 us (0.57x recurrent, was 0.91x),
//     128: 58.1 (0.42x), 256: 95.3 (0.35x), 512: 170.9 (0.32x). Missed: 1.7x at 256 (best 1.56x,
//     single kernel) and ReplaySSM's 45.7 / 161 / 316 us at 64 / 256 / 512 (50.0 / 173.6 /
//     340.2); direct C = 64 reaches 0.5x from batch 128, not 64. Next: take the fold out of B's
//     grid (a compacted list of folding rows written by A, one persistent fold kernel), so that
//     B reserves only the S0 tile and its non-folding blocks stream read-only; cheap early exits
//     (B reserves 57 KiB per block at C = 64 even for rows it skips, 3 blocks/SM) for direct.
//   v6 (76b052f, 323357e) prologue without serial global round trips. ncu + SASS samples of the
//     single kernel at 256, C = 8 (2ec434419a3b): 36% occupancy, 22% of warp samples waiting on
//     loads issued one after another (slot -> fill -> G_{n-1}, then v, G_j stored to shared memory
//     by plain loads, the token's k, q and gates), 18% at the barrier behind them. Now the token's
//     k, q, gates go out before the slot lookup, G_j, G_{n-1}, v (and in B kernel A's r, s) by
//     cp.async, k and q are normalised while the copies fly, one wait. Predicted: 5-10% at large
//     batch, the chain being the critical path (tile waits were only 6% of samples). Measured
//     (323357e, results/decode_h200.csv): 64: 47.5 us [C = 8] (was 50.0), 128: 88.3 (90.1), 256:
//     165.1 [8] (173.6; 1.64x recurrent), 512: 333.1 (340.2); batch 1: 4.07 [1] against recurrent
//     3.91 (0.96x; was 0.99x), unchanged by skipping the second barrier at n = 0 (8a47f6b: 4.13 vs
//     3.96-3.99, three runs) or by other rows per block (32: 4.24 vs 4.16). Also measured:
//     --rows-per-block 32 at batch 8 is 6% faster for both recurrent and KVBuffer (11.03 / 10.89
//     against 11.78 / 11.65 with the automatic 16), left for the dispatch rule; a 64-register
//     build (8 blocks/SM) was 15% slower at 256 (190.5 us). Missed still: 1.7x at 256 (1.64x),
//     ReplaySSM's 45.7 / 161 / 316 at 64 / 256 / 512 (47.5 / 165.1 / 333.1), batch 1. Next: a
//     persistent grid that prefetches the next (request, head) item's S0 tile and buffer while
//     computing the current one (the per-block chain is still the limit: 83% of copy bandwidth
//     at C = 8 where recurrent moves 94%).
//   v7 persistent grid, two stages (branch exp/persistent-two-stage, 1b8d8a3): blocks loop over
//     (row, head, tile) items, the next item's S0 tile, buffer and token copies in flight into the
//     second stage while the current one computes, lookups and gates loaded ahead into registers.
//     Predicted: the per-block chain hidden, toward the bytes limit (~150 us at 256, C = 8).
//     Measured (correct: 17 new cases, memcheck and racecheck clean): slower everywhere, 256:
//     204.8 us [C = 8] against 180.4 for the single kernel in the same run, C = 16 274 us. Two
//     stages halve the blocks per SM (3, at C = 16 2: 12 or 8 warps), and per item time stayed
//     ~5 us whatever the blocks per SM: the stage hold time, not the launch, set the rate.
//   v8 L2 prefetch (branch exp/l2-prefetch, c3e29b2): each block also prefetches
//     (cp.async.bulk.prefetch.L2) the S0 tile of the block D indices later, to hold more of the
//     read in flight than shared memory allows. Predicted a few % at large batch. Measured at
//     D = 0 / 264 / 528 / 792 / 1584, 256, C = 8: 174.1 / 177.0 / 183.7 / 208.2 / 240.6 us
//     (recurrent 271 / 269 / 310 / 355 / 366): no gain at any distance, and from 528 blocks
//     (17 MB) ahead both kernels slow down, as if prefetched lines were evicted before use.
//   v9 persistent grid, one stage (branch exp/persistent-one-stage, 61990e3): the single kernel's
//     shared memory (6 blocks per SM), next item's lookups in registers, copies issued the moment
//     the stage frees: no launch and no slot round trip in the stage's hold time. Predicted
//     5-15% (the slot round trip was 12% of warp samples). Measured, same run: 64: 48.6 against
//     49.2 us [C = 8], 256: 182.1 against 174.8, 512: 362.7 against 343.0; batch 1 and 8 10-20%
//     slower (a block per item there). Dropped: the round trip is hidden by the other resident
//     blocks, not on the critical path.
//   ncu (6acdf76's single kernel = 323357e's, 256, C = 8, kernel alone 173.3 us at 1.91 GHz):
//     DRAM 74% (3.57 TB/s), issue slots 61% busy (2.51 instructions per cycle per SM, 1.37
//     eligible warps per scheduler), 6 blocks per SM by both registers (80) and shared memory
//     (36 KiB). 6346 warp instructions per block: 36% prologue (address arithmetic, k/q
//     normalisation repeated by every warp, copy issue), 8% per-block key scalars, 26% the row
//     dots, 7% u-tile terms, 14% the fold (1 block in 8), 5% the entry store. Warp samples: 29%
//     at the barrier behind the buffer copies (cp.async), 12% on the first lookups, 30% in the
//     row loop. Recurrent (same tiles): DRAM 82%, issue 23% busy. So the single kernel is bound
//     by latency at 6 blocks per SM with a large share of issue; hoisting the appended entry's
//     address out of the row loop (v10 below) changed nothing measurable.
//   v10 (771f0cd) rows per block capped per launch shape (gdn_decode_device.h): 32 for the
//     recurrent kernel and split kernel B, 64 for the single kernel; small batches aim at 4
//     blocks per SM (was 8). Measured (full sweep at 771f0cd): recurrent in place at
//     batch 64 70.8 us (89.7% of copy; 71.05 before), out of place at 256 266.3 (268.4); direct
//     C = 64 at 64 34.0 us (0.48x recurrent; 39.4 before); batch 8: recurrent 11.02 (11.78),
//     KVBuffer 10.85 [C = 2] (11.65). KVBuffer at its best C: 4.07 / 47.07 / 87.86 / 166.28 /
//     324.07 us at 1 / 64 / 128 / 256 / 512 (1.63x at 256, 1.66x at 512). Interleaved runs
//     of the same binaries (A B A B) agree within 0.3%, but separate runs differ by up to 5%:
//     the H200 holds ~690-700 W during these sweeps and lowers the SM clock (1500-1980 MHz
//     sampled), which moves this latency- and issue-bound kernel more than the recurrent one.
//     256, C = 8 measured 160.7-160.9 us in three interleaved runs (1.69x against the sweep's
//     recurrent 271.0), 166.3 in the sweep (1.63x).
//   v11 (not kept) warp 0 alone normalises the token's k and q into shared memory for the block
//     (every warp did the same ~150 instructions: ~8% of the block's). Predicted 2-4% at large
//     batch (issue slots 61% busy). Measured, interleaved three times with 5ba8ad4: 256, C = 8
//     156.7-157.1 against 158.3-159.1 us, 512: 319.8-322.3 against 324.3-332.5 (1-3% faster),
//     C = 16 within 1%, batch 1 4.33-4.35 against 4.22-4.23 (3% slower: the normalisation moves
//     onto one warp's critical path where latency rules). Dropped for the batch-1 loss. (Its
//     extra static shared memory also exposed that launch_kernel raised the dynamic limit only
//     for > 48 KiB of dynamic memory; it now counts the static part too.)
//   v12 split kernel B's rows by capacity (gdn_decode_device.h): v10's 32-row cap made direct mode
//     at C < 32 10-29% slower from batch 128 (256, C = 8: 70.5 against 58.8 us: more blocks that
//     exit at once) and 30-42% slower at batch 8, while C >= 32 gained (C = 64 at 64: 34.0
//     against 39.4). Now 32 rows only for C >= 32, and 8 blocks per SM for small batches.
//     Predicted: direct at C < 32 back to 323357e's table (256: 58.8 [8]), C = 64 as in v10.
//     Measured (results/decode_h200.csv, 607165 = a09263d's kernels): as predicted, direct at its
//     best C 7.03 [16] / 19.73 [8] / 58.79 [8] / 109.80 [8] us at 8 / 64 / 256 / 512 (323357e:
//     7.03 / 19.67 / 58.81 / 109.56), direct C = 64 34.3 / 52.0 / 90.9 us at 64 / 128 / 256 (0.48x /
//     0.38x / 0.34x recurrent), KVBuffer split at C = 64 62.6 us at 64 (67.4 with 64 rows).
//     Result of this stop (same sweep): KVBuffer at its best C 4.06 / 47.04 / 88.26 / 165.38 /
//     325.59 us at 1 / 64 / 128 / 256 / 512 (0.96x / 1.51x / 1.56x / 1.64x / 1.65x recurrent).
//     Short runs of batch 256, C = 8 alone or interleaved with recurrent: 157.3-157.5 us (1.73x);
//     right after C = 1, 2, 4 of the same batch in one process (as in the sweep): 164.3-167.6 us,
//     whether or not the pools are refilled; recurrent 271-273 us either way
//     (results/README.md, "order effect"). Missed still: 1.7x in the sweep, batch 1, ReplaySSM
//     at 64 / 256 / 512.
//   v13 (7c875da, 12cee53, bcb1464) the prologue's order and integer work. (a) The scheduler row
//     metadata is indexed by row: loaded with the slot instead of after it. Measured (interleaved
//     with 323937c): batch 1 C = 1 4.12 -> 4.00 us; 256, C = 8 157.5 -> 152.8 (3%). (b) Grid
//     (V tiles x value heads per key head, key heads, rows), coordinates by bit operations: the
//     recurrent kernel's slot load had waited behind ~5 runtime divisions (batch 1 3.95 -> 3.53
//     us, in place at 64 89.7% -> 90.3-91.4% of copy); KVBuffer within noise (45.7 -> 45.4-45.5
//     at 64, 152.8 -> 152.4 at 256). Not kept: loading the slot before the token's k, q (256,
//     C = 8 152.8 -> 162.2 us, batch 1 unchanged). Batch 1 stays 3.93-3.94 us against the
//     recurrent kernel's 3.53-3.58 (ncu, caches flushed: 4.83 against 4.45 us, 648k against 483k
//     warp instructions). Summed over the kernel, the warp stall samples (387 against 325) differ
//     mostly in no_inst (82 against 33: instruction fetch) and wait (65 against 37): at batch 1
//     each SM runs about two blocks once, so the larger cached-u kernel (buffer copies, key
//     scalars, unrolled fold loops, entry stores, all present at C = 1 behind runtime branches)
//     is fetched cold. Next, untested: a compact instantiation for the no-entry case (n == 0 for
//     every row at C = 1; compiled on branch exp/c1-no-entries) or hot-path-first code layout,
//     measured by no_inst samples at batch 1.
//   v14 (not kept, not measured) v11's block-shared k, q normalisation only from batch 32 (it
//     had lost 3% at batch 1). Predicted 1-3% at 256 and 512. The first build hung
//     test_gdn_decode: group 0 (8 lanes) ran finish_token_kq, whose shuffles name the full warp,
//     without the other 24 lanes of its warp. The session's device time went to the hang (400 s
//     to the call's timeout); a fix (the whole warp 0 normalises, group 0 stores) is compiled on
//     branch exp/shared-kq, not run.
//   Result of this stop (results/decode_h200.csv, bcb1464, full sweep): KVBuffer at its best C
//     3.96 / 45.49 / 81.34 / 157.02 / 302.75 us at 1 / 64 / 128 / 256 / 512 (0.89x / 1.55x /
//     1.69x / 1.73x / 1.79x recurrent; ReplaySSM 7.5 / 45.7 / 161 / 316 beaten at every batch,
//     at 64 by 0.5%); recurrent in place 3.52 / 70.56 (90.9% of copy) / 272.09 / 540.69, out of
//     place 267.07 at 256 (FLA 259). Missed still: batch 1 (0.89x) and FLA's 259 out of place.
//   v15 (not kept; 78e9670 + branch exp/c1-no-entries, interleaved twice with 78e9670) the
//     NO_ENTRIES instantiation for C = 1 (v13's next step): batch 1 3.89 -> 3.84-3.86 us
//     (predicted ~3.6), elsewhere within noise: instruction fetch was not the gap. v14's fix
//     (exp/shared-kq, same run): 256, C = 8 158.8-160.1 -> 162.5 us: not kept either.
//   ncu at batch 1, C = 1 (78e9670, caches flushed): 4.80 us against the recurrent kernel's 4.35,
//     578 against 429 warp instructions per warp. In the SASS the block's v copy (cp.async) sits
//     after finish_token_kq's normalisation (~120 instructions, 9 dependent shuffles): the
//     compiler moved the register-only normalisation above the asm copy.
//   The recurrent kernel's one-warp shape (gdn_decode_recurrent.cu log v4) streams at 97-98% of
//     copy where these 64-row tiles stream at 92-94%: 264.2 us in place at 256 against 273.4 for
//     this kernel at C = 1, so KVBuffer at C = 8 (154.7-160.2 us across this session's runs) is
//     1.65-1.71x the stronger recurrent baseline, where it was 1.73x the tile one.
//   v16 (not kept; branch exp/warp-kvbuffer, a4cc452) the one-warp shape for the buffered step:
//     S0 and every buffered key slice in registers, entry sums spread over the warp's 4 lane
//     quarters, cached-u bf16 entries with row metadata and C <= 16. Predicted, written before
//     measuring: 256, C = 8 159.5 -> ~150 us. Measured (correct: 96/96 decode tests, memcheck
//     clean; interleaved twice with the single kernel): 256, C = 8 213.3 against 160.2 us,
//     C = 16 304.1 against 171.8, C = 4 199-202 against 163.7; batch 32 and 64 also slower. ncu
//     (256, C = 8): 136.5M warp instructions, issue slots 63% busy, DRAM 62%. Each 4 KiB warp
//     repeats the key head's 2 n key dot products (5 shuffles per warp sum) that the 64-row
//     block did once per 32 KiB: at about one warp shuffle per SM clock, the shuffles alone
//     outlast the 4 KiB's share of DRAM time. The prediction counted instructions per warp, not
//     against the shuffle unit's rate.
//   v17 (not kept, same run) this kernel's v copy issued with the token's loads, before the
//     slot. Predicted batch 1, C = 1 3.89 -> ~3.6 us; measured 3.95 -> 3.92-3.93.
//   v18 (not kept; branch exp/ldgsts-tile, c9c2d25) the S0 tile by every thread's cp.async
//     instead of the bulk copy engine, to test whether the engine held this kernel below the
//     one-warp recurrent kernel's streaming rate. Predicted a few % at 256. Measured
//     (interleaved twice with 3657090): 256, C = 8 169.5-170.2 against 167.0 us, C = 16 167.5
//     against 169.6; batch 32 and 64 2-5% faster (C = 8: 25.9 against 27.3, 44.3 against 45.5),
//     128 and 512 within noise. Mixed, and nothing at the point that matters: not kept.
//   Spread (3657090): 256, C = 8 measures 154.9-155.7 us in four fresh processes and two more
//     seeds, but 155.5 -> 156.4 -> 157.4 when repeated in one process after C = 16 points, 160.0
//     in the full sweep (after ~40 s of load) and 167.0 in call 5's A/B; the recurrent kernel
//     stays within 0.5% throughout (259.9-261.3). The kernel is not purely memory-bound, so its
//     time follows the GPU's power state (624 W, SM 1965 MHz read right after); the README
//     reports the sweep's numbers and this spread.
//   v19 (not kept; branch exp/keys-in-registers, 915d1c0) cached-u keys in registers up to C = 16
//     (group g holds key g; the fold reads the keys from the pool through L1), so that the tile's
//     shared memory no longer carries C K entries: at C = 16 the kernel ran at 88% of copy against
//     95% at C = 8, and its 39.4 KiB of dynamic shared memory fit 5 blocks per SM, not 6.
//     Predicted, written before measuring: 256, C = 16 162 -> ~154 us, C = 8 unchanged. Measured
//     (correct: 85/85, memcheck and racecheck clean; fresh processes, then interleaved twice):
//     256, C = 8 154.4 -> 165.7 us and C = 16 162.3 -> 172.7 fresh; batch 32, C = 8 27.2 ->
//     31.9, 128 81.7 -> 89.4, 512 310 -> 333: slower everywhere, also where no block folds, so the
//     fold's key reloads are not the cause; not kept, cause not isolated.
//   Telemetry (6ce0628: the sweep records NVML's SM clock and board power per row): from batch 128
//     this kernel runs at the board's 700 W cap with the SM clock at 1617-1752 MHz, where the
//     recurrent kernels stream at 1980 MHz and 490-590 W. That is the spread above: 256, C = 8
//     162.6 us at 1671 MHz in that sweep.
//   Result of this stop (3657090, full sweep): KVBuffer at its best C 3.95 [C = 1] / 45.46 /
//     81.33 / 160.03 / 303.39 [C = 8] at 1 / 64 / 128 / 256 / 512; against the one-warp
//     recurrent kernel (3.53 / 67.41 / 132.03 / 261.29 / 519.62 in place) 0.89x / 1.48x / 1.62x /
//     1.63x / 1.71x. ReplaySSM (7.5 / 45.7 / 161 / 316) still beaten at every batch.
//   v20 capacity 1 through the recurrent kernels (header, "Capacity 1"). Predicted, written before
//     measuring: batch 1, C = 1 from 3.94 us to the recurrent kernel's ~3.5 (the same update, one
//     more load beside the slot). First build (d85d569): 3.65 against 3.50. SASS (cuobjdump):
//     ptxas had moved the row_has_state load below the slot < 0 exit, a second dependent round
//     trip; a relaxed gpu-scope load (load_unsunk) stays put. Measured (22a9216, interleaved
//     twice with 6ce0628): 3.521-3.529 against the recurrent kernel's 3.517-3.522 (6ce0628's C = 1:
//     3.94-3.96); batch 8 10.55-10.59 against 10.43-10.47 (11.55). The one-warp shape from batch 32
//     stays 1-3% behind the recurrent kernel at C = 1 (35.9 against 34.9 at 32), where C = 1 is
//     not the best C. The sweep no longer advances the row metadata at C = 1 (it never changes).
//   v20b (not kept; branch exp/a-key-rounds, d85d569) kernel A loading every key round at once:
//     its loop over rounds of 16 keys waited for each round's loads. Predicted, written before
//     measuring: direct C = 64 at batch 64 34.3 -> ~31 us. Measured: 38.4 (ncu: A 17.5 -> 22.3
//     us): the raw keys took the register count from 64 to 128 (80 with spills under a 6-block
//     bound).
//   v21 kernel B over compacted row groups for gdn_decode_direct (COMPACT above). ncu (6ce0628,
//     direct C = 64 at batch 64, kernels serialised): A 17.5 us, B 25.2, where B's real work is
//     one request's fold (~3 us); the other 127 of every 128 blocks read their row's metadata and
//     exit, 8192 blocks at 5 per SM: ~12 waves. Predicted, written before measuring: C = 64 at
//     batch 64 34.3 -> ~22-25 us. Measured (22a9216, interleaved twice with 6ce0628): 64: 27.9
//     (34.3), 128: 46.7 (52.8), 256: 72.2 (87.8), 512: 137.6 (158.3); C = 32 5-14% faster from
//     batch 128; but at C <= 8, where B / C rows fold every step and a few groups run them in
//     series, 3-8% slower (256, C = 4: 68.2 against 63.3). Kept from C = 16 (kCompactMinCapacity;
//     128, C = 16: 29.2 against 33.2; 64: 23.2 against 22.5). Two more ptxas findings in the
//     same kernel: the scan's short-circuit test loaded each row's metadata after the previous
//     one's (rewritten: all 24 loads issued at once), and kernel B's `slot < 0 || ...` exit became
//     a slot exit followed by the metadata loads (rewritten as one predicate of the three values,
//     plain loads: f831236). Final A/B (f831236 against 6ce0628, interleaved twice): batch 8,
//     C = 4 / 8 8.74 / 7.88 against 8.76 / 7.94, C = 16 7.49 against 7.14 (5% slower: batch 8 was
//     compacted too, v21b), C = 64 28.2 against 34.4 at batch 64.
//   v21b the compacted kernel only where the plain grid runs >= 12 waves (batch >= 12 G). The
//     row_groups column (3e71d7e, results/direct_groups_h200.csv) showed batch 8 at C >= 16
//     compacted into 3 groups: 7.54 against the plain kernel's 7.14 us at C = 16 (6ce0628). All
//     points measured so far, plain -> compacted, by the plain grid's waves B / G: batch 8 (2.7
//     waves) C = 16 / 32 / 64 7.14 / 7.52 / 8.64 -> 7.54 / 7.75 / 8.76; batch 64 C = 16 (6.4)
//     22.4 -> 22.9, C = 32 (10.7) 26.2 -> 26.6, C = 64 (12.8) 34.4 -> 28.0; batch 128 C = 16 (12.8)
//     33.2 -> 28.9; 256 (25.6) 56.6 -> 54.1; 512 C = 16 (51) 103.3 -> 102.9, C = 32 120.3 -> 106.1.
//     Measured (89b27eb, results/direct_groups_h200.csv): batch 8 C = 16 / 32 / 64 7.12 / 7.52 /
//     8.65 us (plain), batch 64 C = 16 / 32 22.66 / 26.34 (plain), C = 64 28.29 (5 groups), and
//     from batch 128 the compacted times above.
//   Capacities between the powers of two (b4e535b, results/decode_between_h200.csv): at 256, C =
//     6 / 8 / 10 / 12 159.3 / 155.9 / 156.4 / 163.8 us: C = 10's fewer bytes (model 1.765x against
//     1.730x at C = 8) buy nothing, and C = 12 loses a block per SM to shared memory.
//   Result of this stop (f831236, results/decode_h200.csv): KVBuffer at its best C 3.54 [C = 1] /
//     45.49 / 81.45 / 157.37 / 304.04 [C = 8] at 1 / 64 / 128 / 256 / 512 against the recurrent
//     kernel's 3.53 / 67.42 / 132.16 / 261.23 / 519.61: 1.00x / 1.48x / 1.62x / 1.66x / 1.71x, the
//     256 and 512 points at the 700 W cap (1785 / 1797 MHz); ReplaySSM beaten at every batch.
//     6ecd108's sweep of the same kernel on another H200 of the same kind ran hotter (256: 161.3
//     us at 1689 MHz; 512: 326.7 [C = 4]): results/decode_h200_6ecd108.csv. Direct, context 64:
//     0.42x recurrent at batch 64 (28.30 us).
//   v22 (not kept; 287c67d) the single kernel's fold on the tensor cores (as the verify kernel's,
//     gdn_verify_kvbuffer.cu log v12): per warp its 16 rows as one m16n8k8 fragment, C from the S0
//     tile, D stored to the pool, for cached-u bf16 entries, 64-row tiles and C <= 16. Predicted,
//     written before measuring: ~4% fewer instructions at 256, C = 8 (1 block in 8 folds), 2-3%
//     faster at the power cap. Measured (interleaved twice with ccb38a2): 256, C = 8 154.8 -> 163.0
//     us, 128 81.8 -> 86.0. ncu (256, C = 8): 6.6% fewer instructions, but shared-memory bank
//     conflicts 0.42M -> 2.90M: the tile's rows are 512 bytes apart, so the fragment's 8 rows read
//     the same 8 banks, and the kernel waits on shared memory more than it saves in issue.
//   ncu (110e010 = f831236's kernel, 256, C = 8, source-level samples): 5873 warp instructions per
//     block; 25% of the warp samples wait for the block's small cp.async copies (keys, u tile, G_j,
//     v: one dependent round trip after the slot) at the first barrier, 15% for the slot and row
//     metadata; the row loop is 56% of the instructions, a third of them address and loop
//     arithmetic (the u-tile loop unrolled by 4 with remainder tests for n <= 7 entries).
//   v23 (b724990) the S0 tile's bulk copies issued after the small copies (it was issued first, so
//     the block's 32 KiB sat ahead of the few hundred bytes it waits for at the first barrier),
//     and the u-tile terms as one predicated round per 8 entries. Predicted, written before
//     measuring: a few % at large batch from the first-barrier wait. Measured, interleaved three
//     times with 110e010 (a cool machine, 1980 MHz): 256, C = 8 152.6 -> 148.7 us (1.757x the
//     sweep's recurrent), 128 81.6 -> 78.1, batch 32, C = 16 28.96 -> 25.88; the u-tile change
//     alone (df66764) 152.6 -> 152.0. In the full sweep (results/decode_h200.csv, b724990) the
//     256 point ran at the 700 W cap and 1734 MHz: 156.03 us, 1.674x (f831236: 157.37, 1.66x);
//     512 301.25 (1.726x), 64 42.49 (45.49), 32 24.74 (27.25), and batch 8 9.61 at C = 8 (1.09x
//     recurrent; C = 1 had been best there, 10.52).
//   v24 (5cc9ee1) the rows' outputs and appended entries staged in shared memory and stored by
//     16-byte vectors after the row loop: lane 0's per-row stores had cost ~35 instructions of
//     address arithmetic each, ~10% of the block's (ncu above). Predicted 2-3% at the power cap.
//     Measured, interleaved twice with b724990: 256, C = 8 152.0 -> 151.1 us, 128 78.9 -> 78.3,
//     batch 32 25.0 -> 24.6 (0.6-1.4%). Its full sweep (results/decode_h200_5cc9ee1.csv) ran on a
//     hotter machine, at the 700 W cap from batch 64 (1833 MHz; b724990's run: from 128): 256
//     156.02 us [C = 8] at 1722 MHz (1.667x), 512 319.69 [C = 4] (1.617x).
//   Result of this stop (b724990, results/decode_h200.csv): KVBuffer at its best C 3.56 [C = 1] /
//     9.61 / 24.74 / 42.49 / 79.59 / 156.03 / 301.25 [C = 8] at 1 / 8 / 32 / 64 / 128 / 256 / 512
//     against the recurrent kernel's 3.55 / 10.49 / 34.95 / 67.48 / 132.18 / 261.24 / 519.84:
//     1.00x / 1.09x / 1.41x / 1.59x / 1.66x / 1.67x / 1.73x, 256 and 512 at the 700 W cap
//     (1734 / 1782 MHz). Missed still: 1.7x at 256 in the sweep.
//   ncu (5104439 below, 256, C = 8, source counters): 4799 warp instructions per block (110e010:
//     5873); the prologue to the first barrier is 36% of them (the token's k, q normalisation 15%),
//     the row loop 35%, the fold 18% (1 block in 8), the key round 4%; 30% of the warp samples
//     wait for the slot and row metadata or, at the first barrier, for the small copies.
//   v25 (not kept; 4a886e5) the fold of the whole tile after the row loop (fold_tile): a warp per
//     row, a lane per 4 columns holding its columns of 8 keys in registers for all of its rows,
//     a_j = sw_j u_j[v] by shuffle; fold_row reloads n keys per row from shared memory (7 x 256 B
//     at C = 8). Predicted, written before measuring: the folding blocks' instructions halved
//     (~8% of all), 2-4% at 256, C = 8 at the power cap. Measured (interleaved twice with
//     5cc9ee1): 256, C = 8 148.1 -> 147.8 us, 512 298 -> 294, 128 84.7 -> 84.1, but C = 4 1-2%
//     slower and batch 32, C = 8 24.5 -> 25.0: the folding blocks now end with a serial phase.
//     Measured again on top of v26 (6464123 against the same build without it, call 4): within
//     0.4% everywhere. Dropped.
//   v26 (2618211, 6464123) row-loop trims, counted in the SASS before measuring: the per-row
//     arrays (bars, sv, s_out, s_entry) moved from static to dynamic shared memory (a static
//     array's address, rebuilt from the CTA id of the shared window each time ptxas
//     rematerialised it, took ~5 instructions, three times per row); without a state the tile is
//     zeroed once (16 stores per thread) instead of zero registers before every row's load; the
//     first u-tile round reads sc_j, sd_j from registers loaded before the loop; warps whose
//     groups hold no entry skip the key round. Row iteration 132 -> 105 instructions. Predicted
//     ~1-2% at the power cap. First build (2618211) placed the per-row arrays ahead of the tile,
//     704 bytes in: 256, C = 8 148.1 -> 150.9 us, 128 77.6 -> 79.1 at 1980 MHz (the bulk copies'
//     destination lost its 128-byte alignment). With the tile back at offset 0 and the arrays
//     after the buffer staging at a host-computed offset (6464123), interleaved twice on a
//     hotter machine: 256, C = 8 151.5 -> 147.5 us, 512 322 -> 301, 128 78.7 -> 77.0, C = 4 and
//     16, batch 8 and 32 also 0-4% faster. On a cool machine (5104439 = 6464123 without v25):
//     256 148.1 -> 145.9, 512 295.6 -> 286.5, 128 77.5 -> 76.4, batch 1, C = 8 4.06 -> 3.97.
//   v27 (f79f5cd) the token's k and q unnormalised: their scales go on the sums (e^{G_t} kinv on
//     S0 k, e^{G_t} qinv on S0 q, kinv, qinv on the key scalars, u_t kinv in the fold, kinv on the
//     appended key), 32 multiplies per thread fewer; bf16 pairs converted by one AND (high) and
//     one shift (low) where the intrinsic took a PRMT and a shift for the high one (every bf16
//     slice load in the decode kernels). Predicted ~0.5-1%. Measured: not separable from v26,
//     256, C = 8 147.5 us with it (call 6) and without it (call 4) on machines where 5cc9ee1 took
//     151.3-151.7; kept for the instructions it removes (the same results within rounding: every
//     decode test passes with unchanged tolerances).
//   v28 (not kept; fb7c860) load_unsunk through the non-coherent path (ld.global.nc) instead of a
//     relaxed gpu-scope load, so L1 could serve the capacity-1 route's has_state. Predicted: batch
//     1, C = 1 at the recurrent kernel's 3.49 us. Measured (three interleaved runs): 3.65 against
//     3.49. Reverted.
//   v29 (d6f2445) every_row_has_state: the scheduler's promise that no row of the step is
//     stateless lets the capacity-1 route launch the plain recurrent kernels. The sweeps had
//     measured batch 1, C = 1 0.3-0.8% behind the recurrent kernel (f79f5cd: 3.496 against 3.468
//     us); call 8, interleaved twice: 3.51 / 3.50 against 3.50 / 3.50.
//   Result of this stop (d6f2445, results/decode_h200.csv): KVBuffer at its best C 3.48 [C = 1] /
//     9.14 [4] / 24.02 / 41.90 / 78.49 / 149.34 / 305.47 [C = 8] at 1 / 8 / 32 / 64 / 128 / 256 /
//     512 against the recurrent kernel's 3.49 / 10.43 / 34.69 / 67.14 / 131.49 / 259.93 / 517.04:
//     1.003x / 1.14x / 1.45x / 1.60x / 1.68x / 1.74x / 1.69x, 128-512 at the 700 W cap (1709 /
//     1728 / 1530 MHz). Two more sweeps of the same C > 1 kernel on other machines: 1.733x and
//     1.738x at 256 (results/decode_h200_f79f5cd.csv; fb7c860 in call 7).
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/gdn_decode.h"
#include "kernels/gdn_decode_device.h"

namespace kvbuf {
namespace gdn_detail {

constexpr int kMaxCapacity = 64;
constexpr int kUtilePad = 8;  // u tile row stride rows + 8: 16-byte rows, a group's 8 j's on distinct banks
// Auto picks the split path from kSplitMinBatch request rows and, per entry point, from this
// capacity C (measured on the H200, 9a2eb43: header log v5b).
constexpr int kSplitMinBatch = 8;
constexpr int kSplitMinCapacityKVBuffer = 64;
constexpr int kSplitMinCapacityDirect = 4;

template <int K, int V, class E, bool RAW>
__global__ void __launch_bounds__(kThreads, 6) gdn_decode_kvbuffer_kernel(GdnKVBufferParams p, int rows, int rows_offset) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  constexpr int N = K / 8;
  extern __shared__ __align__(128) float smem[];
  // Dynamic shared memory: the S0 tile first (128-byte aligned for the bulk copies), the buffer
  // staging, then the per-row arrays at rows_offset bytes (kvbuffer_smem_layout). The per-row
  // arrays were static arrays once: their addresses took ~5 instructions (the CTA id of the shared
  // window) every time ptxas rematerialised one in the row loop; ahead of the tile they cost the
  // tile its alignment (log v26).
  const int C = p.capacity;
  const int ustride = rows + kUtilePad;
  float* const tile = smem;                                          // [rows, K] S0 rows
  E* const skeys = reinterpret_cast<E*>(tile + rows * K);            // [C][K] keys k_j
  E* const utile = skeys + C * K;                                    // cached: [C][ustride] u_j
  float* const sG = reinterpret_cast<float*>(utile + (RAW ? 0 : C * ustride));  // G_j
  float* const sc = sG + C;                                          // c_j
  float* const sd = sc + C;                                          // d_j
  float* const sw = sd + C;                                          // e^{G_t - G_j}
  float* const L = sw + C;      // raw: [C][C], L[j][i] = beta_j e^{G_j-G_i} k_i.k_j (i < j < n)
  float* const eG = L + C * C;  // raw: e^{G_j}
  float* const bj = eG + C;     // raw: beta_j
  float* const scratch = bj + C;  // raw: [kGroups][C] per-group a_j, then u_j
  uint64_t* const bars = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(smem) + rows_offset);  // [kMaxChunks]
  __nv_bfloat16* const sv = reinterpret_cast<__nv_bfloat16*>(bars + kMaxChunks);  // [rows] v
  // The rows' outputs and appended entries, stored to global memory by 16-byte vectors after the
  // row loop (one store per row from lane 0 cost ~35 instructions of address arithmetic each).
  __nv_bfloat16* const s_out = sv + rows;                                        // [rows]
  E* const s_entry = reinterpret_cast<E*>(s_out + rows);                         // [rows]
  const GdnStepIO& io = p.io;
  const BlockCoords c = block_coords<V>(rows);
  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  const int H = io.H, HV = io.HV;
  const int kh = c.kh;
  // The token's own inputs do not depend on the pools: their loads go out first and are consumed
  // only after the block's one wait, so no global round trip is spent on them alone.
  TokenKQRaw<K> kq_raw;
  issue_token_kq<K>(io, c.row, kh, lane, kq_raw);
  float g, beta;
  load_gates(io, c.row, c.h, g, beta);
  // Scheduler row metadata is indexed by row, not slot: loaded with the slot, so the S0 copies
  // start one round trip after entry, as in gdn_decode_recurrent.
  const bool row_meta = p.row_fill != nullptr;
  int n = 0, has_state_flag = 0;
  if (row_meta) n = p.row_fill[c.row], has_state_flag = p.row_has_state[c.row];
  const int slot = io.slot[c.row];
  if (slot < 0) {
    write_zero_output(io, c, rows);
    return;
  }
  if (!row_meta) n = p.fill[slot], has_state_flag = p.has_state[slot];
  const bool has_state = has_state_flag != 0;
  const bool fold = n + 1 == C;
  const int chunks = rows / kGroups;
  const size_t head = (size_t(slot) * HV + c.h) * V * K;
  float* state = p.state + head;

  // Everything else the block reads goes to shared memory in one round trip by cp.async (no
  // registers held): keys [n][K], (cached-u) the u tile [n][rows], G_j (and beta_j), and v of the
  // block's rows, all issued before the first wait.
  E* bk = static_cast<E*>(p.buf_k) + size_t(slot) * C * H * K;       // [C, H, K]
  E* bval = static_cast<E*>(p.buf_val) + size_t(slot) * C * HV * V;  // [C, HV, V]
  float* gcum = p.buf_gcum + size_t(slot) * C * HV;                  // [C, HV]
  constexpr int kVec = 16 / sizeof(E);
  {
    const int kvecs = K / kVec;
    for (int idx = threadIdx.x; idx < n * kvecs; idx += kThreads) {
      const int j = idx / kvecs, x = idx % kvecs;
      cp_async16(skeys + j * K + x * kVec, bk + (size_t(j) * H + kh) * K + x * kVec);
    }
    if (!RAW) {
      const int uvecs = rows / kVec, ushift = __ffs(uvecs) - 1;  // rows and kVec are powers of 2
      for (int idx = threadIdx.x; idx < n * uvecs; idx += kThreads) {
        const int j = idx >> ushift, x = idx & (uvecs - 1);
        cp_async16(utile + j * ustride + x * kVec, bval + (size_t(j) * HV + c.h) * V + c.v0 + x * kVec);
      }
    }
    for (int j = threadIdx.x; j < n; j += kThreads) {
      cp_async4(sG + j, gcum + j * HV + c.h);
      if (RAW) cp_async4(bj + j, p.buf_beta + (size_t(slot) * C + j) * HV + c.h);
    }
    if (threadIdx.x < rows / 8) cp_async16(sv + threadIdx.x * 8, io.v + (size_t(c.row) * HV + c.h) * V + c.v0 + threadIdx.x * 8);
  }
  // The S0 tile after the small copies, which the block waits for first. Without a state the
  // cached-u tile is zeros (S0 = 0), so its row loop reads rows the same way in both modes (the raw
  // variant's row loop, at the register limit, keeps load_tile_row's zero registers).
  if (has_state) {
    if (threadIdx.x == 0) tile_issue<K>(tile, state + size_t(c.v0) * K, chunks, bars);
  } else if (!RAW) {
    for (int i = threadIdx.x; i < rows * K / 4; i += kThreads)
      reinterpret_cast<float4*>(tile)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // k and q stay unnormalised (kinv, qinv): the scales go on the sums that use them.
  float k[N], q[N], kinv, qinv, kq;
  finish_token_kq_unscaled<K>(kq_raw, k, q, kinv, qinv, kq);  // while the copies are in flight
  cp_async_wait_all();
  __syncthreads();
  const float G_t = (n > 0 ? sG[n - 1] : 0.f) + g;
  const float eG_t = expf(G_t);
  const float eG_k = eG_t * kinv, eG_q = eG_t * qinv;

  // Per-block scalars over the buffered keys (shuffle loops: same trip count on every group of a
  // warp; a warp whose groups hold no entry of the round skips it).
  constexpr int kWarpGroups = 32 / kGroupLanes;
  for (int base = 0; base < n; base += kGroups) {
    if (!RAW && base + (threadIdx.x / 32) * kWarpGroups >= n) continue;
    const int j = base + group;
    float kj[N];
    if (j < n) {
      load_slice<K>(skeys + j * K, lane, kj);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) kj[i] = 0.f;
    }
    const float dk = group_sum(dot<N>(kj, k)) * kinv;
    const float dq = group_sum(dot<N>(kj, q)) * qinv;
    if (j < n && lane == 0) {
      const float e = expf(G_t - sG[j]);
      sc[j] = e * dk;
      sd[j] = e * dq;
      sw[j] = e;
      if (RAW) eG[j] = expf(sG[j]);
    }
  }
  if (RAW) {
    for (int base = 0; base < n * n; base += kGroups) {
      const int idx = base + group, j = idx / n, i = idx % n;
      const bool lower = idx < n * n && i < j;
      float ki[N], kj[N];
      if (lower) {
        load_slice<K>(skeys + i * K, lane, ki);
        load_slice<K>(skeys + j * K, lane, kj);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) ki[e] = kj[e] = 0.f;
      }
      const float d = group_sum(dot<N>(ki, kj));
      if (lower && lane == 0) L[j * C + i] = bj[j] * expf(sG[j] - sG[i]) * d;
    }
  }
  if (n > 0) __syncthreads();  // n is block-uniform; with no entries nothing above was written

  __nv_bfloat16* out = io.out + (size_t(c.row) * HV + c.h) * V;
  E* const entry_n = bval + (size_t(n) * HV + c.h) * V;  // this head's values of the appended entry
  float* ua = scratch + group * C;
  const int leader = (threadIdx.x & 31) & ~(kGroupLanes - 1);
  const float sc_lane = !RAW && lane < n ? sc[lane] : 0.f, sd_lane = !RAW && lane < n ? sd[lane] : 0.f;
  const E* const u_lane = utile + lane * ustride;

  for (int ch = 0; ch < chunks; ++ch) {
    const int rl = ch * kGroups + group, r = c.v0 + rl;
    const float v_r = __bfloat162float(sv[rl]);
    float s[N];
    if constexpr (RAW) {
      load_tile_row<K>(has_state, tile, bars, ch, rl, lane, s);
    } else {
      if (has_state) tile_wait(bars + ch);
      load_slice<K>(tile + size_t(rl) * K, lane, s);
    }
    const float pa = dot<N>(s, k), pb = dot<N>(s, q);
    float u_t, o;
    if (!RAW) {
      // Lane l takes entries l, l + 8, ...: one predicated round per 8 entries, the first with its
      // scalars held in registers.
      float pc = 0.f, pd = 0.f;
      if (lane < n) {
        const float uj = to_f32(u_lane[rl]);
        pc = sc_lane * uj;
        pd = sd_lane * uj;
      }
#pragma unroll 1
      for (int j0 = kGroupLanes; j0 < n; j0 += kGroupLanes) {
        const int j = j0 + lane;
        if (j < n) {
          const float uj = to_f32(utile[j * ustride + rl]);
          pc = fmaf(sc[j], uj, pc);
          pd = fmaf(sd[j], uj, pd);
        }
      }
      const float s1 = group_sum(fmaf(eG_k, pa, pc));
      const float s2 = group_sum(fmaf(eG_q, pb, pd));
      u_t = beta * (v_r - s1);
      o = s2 + kq * u_t;
    } else {
      for (int j = 0; j < n; ++j) {
        float aj = 0.f;
        if (has_state) {
          float kj[N];
          load_slice<K>(skeys + j * K, lane, kj);
          aj = group_sum(dot<N>(s, kj));
        }
        if (lane == 0) ua[j] = aj;
      }
      const float a_t = group_sum(pa) * kinv, b_t = group_sum(pb) * qinv;
      __syncwarp();
      u_t = 0.f, o = 0.f;
      if (lane == 0) {
        float corr = 0.f, outb = 0.f;
        for (int j = 0; j < n; ++j) {
          float x = bj[j] * (to_f32(bval[(size_t(j) * HV + c.h) * V + r]) - eG[j] * ua[j]);
          for (int i = 0; i < j; ++i) x = fmaf(-L[j * C + i], ua[i], x);
          ua[j] = x;
          corr = fmaf(sc[j], x, corr);
          outb = fmaf(sd[j], x, outb);
        }
        u_t = beta * (v_r - eG_t * a_t - corr);
        o = eG_t * b_t + outb + kq * u_t;
      }
      u_t = __shfl_sync(0xffffffffu, u_t, leader);
      __syncwarp();
    }
    if (lane == 0) s_out[rl] = __float2bfloat16_rn(o);
    if (fold) {
      if constexpr (RAW) fold_row<K>(s, eG_t, u_t * kinv, k, n, sw, ua, 1, skeys, lane);
      else fold_row<K>(s, eG_t, u_t * kinv, k, n, sw, utile + rl, ustride, skeys, lane);
      store_slice<K>(state + size_t(r) * K, lane, s);
    } else if (lane == 0) {
      s_entry[rl] = from_f32<E>(RAW ? v_r : u_t);
    }
    if (RAW) __syncwarp();  // ua is rewritten by the next row
  }
  __syncthreads();
  if (threadIdx.x < rows / 8)
    reinterpret_cast<uint4*>(out + c.v0)[threadIdx.x] = reinterpret_cast<const uint4*>(s_out)[threadIdx.x];
  if (!fold) {
    for (int i = threadIdx.x; i < rows * int(sizeof(E)) / 16; i += kThreads)
      reinterpret_cast<uint4*>(entry_n + c.v0)[i] = reinterpret_cast<const uint4*>(s_entry)[i];
    if (c.tile == 0) {
      if (c.sub == 0 && group == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) k[i] *= kinv;
        store_slice<K>(bk + (size_t(n) * H + kh) * K, lane, k);
      }
      if (threadIdx.x == 0) {
        gcum[n * HV + c.h] = G_t;
        if (RAW) p.buf_beta[(size_t(slot) * C + n) * HV + c.h] = beta;
      }
    }
  }
  if (row_meta) return;  // the scheduler advances its own fill / has_state
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const int blocks_per_request = int(gridDim.x * gridDim.y);
    if (atomicAdd(&p.done_count[slot], 1) == blocks_per_request - 1) {
      p.fill[slot] = fold ? 0 : n + 1;
      if (fold) p.has_state[slot] = 1;
      p.done_count[slot] = 0;
    }
  }
}

// ---- Split path (cached-u, scheduler row metadata): kernel A then kernel B in one stream.

// Kernel A, the buffer kernel: one block per (row, key head), covering the R = HV/H value heads
// that share the key head's buffered keys. Every read is issued before the first wait: the u rows
// [R, n, V] by cp.async into shared memory, G_j per (head, j), and each group's keys j (8 lanes
// per key, groups over j in parallel) for k_j.k_t and k_j.q_t; the keys are read once per key
// head, not per value head and V tile. Then one thread per (value head, v) sums
// r_v = sum_j c_j u_j[v] and s_v = sum_j d_j u_j[v] from shared memory. Rows with a state or a
// fold get r, s in `scratch` for kernel B; a direct-mode token with no fold is finished here
// (u_t, o, append). Appends k_t and G_t unless the row folds. Triggers kernel B's launch at once
// (programmatic dependent launch): B starts streaming S0 while A runs and waits for A only
// before it reads `scratch`.
template <int K, int V, class E>
__global__ void __launch_bounds__(kThreads) gdn_kvbuffer_split_buffer_kernel(GdnKVBufferParams p) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  constexpr int N = K / 8;
  constexpr int kVec = 16 / sizeof(E);
  extern __shared__ __align__(128) float smem[];
  const GdnStepIO& io = p.io;
  const int H = io.H, HV = io.HV, R = HV / H;
  const int row = blockIdx.x / H, kh = blockIdx.x % H;
  const int slot = io.slot[row], n = p.row_fill[row];
  const bool has_state = p.row_has_state[row] != 0;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  __nv_bfloat16* out = io.out + (size_t(row) * HV + size_t(kh) * R) * V;  // [R, V]: this key head's value heads
  if (slot < 0) {
    for (int i = threadIdx.x; i < R * V; i += kThreads) out[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const int C = p.capacity;
  const bool fold = n + 1 == C;
  const bool finish_here = !has_state && !fold;
  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  E* bk = static_cast<E*>(p.buf_k) + size_t(slot) * C * H * K;       // [C, H, K]
  E* bval = static_cast<E*>(p.buf_val) + size_t(slot) * C * HV * V;  // [C, HV, V]
  float* gcum = p.buf_gcum + size_t(slot) * C * HV;                  // [C, HV]
  E* su = reinterpret_cast<E*>(smem);                                // [R][C][V] u_j rows
  float* sdk = reinterpret_cast<float*>(su + size_t(R) * C * V);     // [C] k_j.k_t
  float* sdq = sdk + C;       // [C] k_j.q_t
  float* sG = sdq + C;        // [R][C] G_j, then c_j
  float* sd = sG + R * C;     // [R][C] d_j
  float* sGt = sd + R * C;    // [R] G_t
  float* sbeta = sGt + R;     // [R] beta

  const int vvecs = V / kVec;
  for (int idx = threadIdx.x; idx < R * n * vvecs; idx += kThreads) {
    const int x = idx % vvecs, ij = idx / vvecs, i = ij / n, j = ij % n;
    cp_async16(su + (size_t(i) * C + j) * V + x * kVec, bval + (size_t(j) * HV + kh * R + i) * V + x * kVec);
  }
  for (int idx = threadIdx.x; idx < R * n; idx += kThreads) {
    const int i = idx / n, j = idx % n;
    sG[i * C + j] = gcum[j * HV + kh * R + i];
  }
  for (int i = threadIdx.x; i < R; i += kThreads) {
    const int h = kh * R + i;
    float g, beta;
    load_gates(io, row, h, g, beta);
    const float G_t = (n > 0 ? gcum[(n - 1) * HV + h] : 0.f) + g;
    sGt[i] = G_t, sbeta[i] = beta;
    if (!fold) gcum[n * HV + h] = G_t;
  }
  float k[N], q[N], kq;
  load_token_kq<K>(io, row, kh, lane, k, q, kq);
  for (int base = 0; base < n; base += kGroups) {  // same trip count on every group (shuffles)
    const int j = base + group;
    float kj[N];
    if (j < n) {
      load_slice<K>(bk + (size_t(j) * H + kh) * K, lane, kj);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) kj[i] = 0.f;
    }
    const float dk = group_sum(dot<N>(kj, k));
    const float dq = group_sum(dot<N>(kj, q));
    if (j < n && lane == 0) sdk[j] = dk, sdq[j] = dq;
  }
  if (!fold && group == 0) store_slice<K>(bk + (size_t(n) * H + kh) * K, lane, k);
  __syncthreads();
  for (int idx = threadIdx.x; idx < R * n; idx += kThreads) {
    const int i = idx / n, j = idx % n;
    const float e = expf(sGt[i] - sG[i * C + j]);
    sG[i * C + j] = e * sdk[j];  // c_j
    sd[i * C + j] = e * sdq[j];
  }
  cp_async_wait_all();
  __syncthreads();
  for (int idx = threadIdx.x; idx < R * V; idx += kThreads) {
    const int i = idx / V, v = idx % V, h = kh * R + i;
    const E* uj = su + size_t(i) * C * V + v;  // u_j[v] at uj[j * V]
    const float* ci = sG + i * C;
    const float* di = sd + i * C;
    float r = 0.f, s = 0.f;
#pragma unroll 8
    for (int j = 0; j < n; ++j) {
      const float u = to_f32(uj[j * V]);
      r = fmaf(ci[j], u, r);
      s = fmaf(di[j], u, s);
    }
    if (finish_here) {
      const float u_t = sbeta[i] * (__bfloat162float(io.v[(size_t(row) * HV + h) * V + v]) - r);
      out[idx] = __float2bfloat16_rn(s + kq * u_t);
      bval[(size_t(n) * HV + h) * V + v] = from_f32<E>(u_t);
    } else {
      float* rs = p.scratch + (size_t(row) * HV + h) * 2 * V;
      rs[v] = r;
      rs[V + v] = s;
    }
  }
}

// Kernel B, the state kernel: the recurrent kernel's shape (block = (row, value head, V tile),
// S0 rows by bulk copies, all chunks in flight) for rows with a state or a fold; other rows exit
// at once (kernel A finished them). u_t and o from S0 plus kernel A's r, s; appends u_t, or folds
// (keys and u tile staged to shared memory by the folding blocks only: 1/C of the requests).
// COMPACT (the direct entry point, batch <= kCompactMaxBatch): the grid has G row groups instead
// of one block row per request; every block finds the rows that need kernel B (a state or a fold)
// and takes those of rank g, g + G, ... in row order, one after another (log v21: in direct mode
// almost every block of the one-row-per-block grid only read its row's metadata and exited).
constexpr int kCompactMaxBatch = 1024;
constexpr int kCompactMinCapacity = 16;
constexpr int kCompactMinWaves = 12;

// Whether kernel B has work for a request row: it exists (slot >= 0) and has a state or folds.
// Bitwise, not short-circuit: ptxas split `slot < 0 || ...` into a slot exit followed by the
// metadata loads, a second dependent round trip (log v21).
__device__ __forceinline__ bool state_kernel_row(int slot, int n, bool has_state, int C) {
  return (slot >= 0) & (has_state | (n + 1 == C));
}

struct SplitStateShared {
  uint64_t bars[kMaxChunks];
  float sr[kMaxChunks * kGroups], ss[kMaxChunks * kGroups];  // kernel A's r, s of the block's rows
  __nv_bfloat16 sv[kMaxChunks * kGroups];                   // v of the block's rows
  float sw[kMaxCapacity];                                   // G_j, then e^{G_t - G_j}: folds only
  float gprev;                                              // G_{n-1}
};

// Kernel B's work for request row c.row (slot, fill n, has_state): its S0 tile copies go out on
// barriers initialised by the caller and complete phase `parity`.
template <int K, int V, class E>
__device__ __forceinline__ void split_state_row(const GdnKVBufferParams& p, int rows, const BlockCoords& c, int slot,
                                                int n, bool has_state, uint32_t parity, float* tile,
                                                SplitStateShared& sh) {
  constexpr int N = K / 8;
  const GdnStepIO& io = p.io;
  const int C = p.capacity;
  const bool fold = n + 1 == C;
  const int H = io.H, HV = io.HV, kh = c.kh;
  const int chunks = rows / kGroups;
  float* state = p.state + (size_t(slot) * HV + c.h) * V * K;
  if (has_state && threadIdx.x == 0) tile_copy<K>(tile, state + size_t(c.v0) * K, chunks, sh.bars);
  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  TokenKQRaw<K> kq_raw;
  issue_token_kq<K>(io, c.row, kh, lane, kq_raw);
  float g, beta;
  load_gates(io, c.row, c.h, g, beta);
  const E* bk = static_cast<const E*>(p.buf_k) + size_t(slot) * C * H * K;
  E* bval = static_cast<E*>(p.buf_val) + size_t(slot) * C * HV * V;
  const float* gcum = p.buf_gcum + size_t(slot) * C * HV;
  // Everything else by cp.async, consumed after one wait: G_{n-1}, v of the block's rows and, in
  // folding blocks, the keys [n, K], their u tile [n, rows] and G_j (read from global memory per
  // row and key, the fold was a chain of dependent loads: ncu measured 91 us for the folding
  // blocks of one request at C = 64).
  constexpr int kVec = 16 / sizeof(E);
  const int ustride = rows + kUtilePad;
  E* skeys = reinterpret_cast<E*>(tile + rows * K);  // [C][K]
  E* utile = skeys + C * K;                          // [C][ustride]
  if (fold) {
    const int kvecs = K / kVec, uvecs = rows / kVec;
    for (int idx = threadIdx.x; idx < n * kvecs; idx += kThreads) {
      const int j = idx / kvecs, x = idx % kvecs;
      cp_async16(skeys + j * K + x * kVec, bk + (size_t(j) * H + kh) * K + x * kVec);
    }
    for (int idx = threadIdx.x; idx < n * uvecs; idx += kThreads) {
      const int j = idx / uvecs, x = idx % uvecs;
      cp_async16(utile + j * ustride + x * kVec, bval + (size_t(j) * HV + c.h) * V + c.v0 + x * kVec);
    }
    for (int j = threadIdx.x; j < n; j += kThreads) cp_async4(sh.sw + j, gcum + j * HV + c.h);
  }
  if (n > 0 && threadIdx.x == 0) cp_async4(&sh.gprev, gcum + (n - 1) * HV + c.h);
  if (threadIdx.x < rows / 8)
    cp_async16(sh.sv + threadIdx.x * 8, io.v + (size_t(c.row) * HV + c.h) * V + c.v0 + threadIdx.x * 8);
  // Kernel A's r, s: wait for A's grid (a no-op when launched without programmatic dependence).
  // Nothing above reads what A writes (scratch, entry n of k and G) or writes what A reads.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const float* rs = p.scratch + (size_t(c.row) * HV + c.h) * 2 * V;
  if (threadIdx.x < rows / 4) {
    cp_async16(sh.sr + threadIdx.x * 4, rs + c.v0 + threadIdx.x * 4);
    cp_async16(sh.ss + threadIdx.x * 4, rs + V + c.v0 + threadIdx.x * 4);
  }
  float k[N], q[N], kq;
  finish_token_kq<K>(kq_raw, k, q, kq);  // while the copies are in flight
  cp_async_wait_all();
  __syncthreads();  // barriers initialised, every cp.async above landed
  const float G_t = (n > 0 ? sh.gprev : 0.f) + g;
  const float eG_t = expf(G_t);
  if (fold) {  // block-uniform
    for (int j = threadIdx.x; j < n; j += kThreads) sh.sw[j] = expf(G_t - sh.sw[j]);
    __syncthreads();
  }

  __nv_bfloat16* out = io.out + (size_t(c.row) * HV + c.h) * V;
  E* const entry_n = bval + (size_t(n) * HV + c.h) * V;  // this head's values of the appended entry
  for (int ch = 0; ch < chunks; ++ch) {
    const int rl = ch * kGroups + group, r = c.v0 + rl;
    float s[N];
    load_tile_row<K>(has_state, tile, sh.bars, ch, rl, lane, s, parity);
    const float a = group_sum(dot<N>(s, k));
    const float b = group_sum(dot<N>(s, q));
    const float u_t = beta * (__bfloat162float(sh.sv[rl]) - fmaf(eG_t, a, sh.sr[rl]));
    if (lane == 0) out[r] = __float2bfloat16_rn(fmaf(eG_t, b, sh.ss[rl]) + kq * u_t);
    if (fold) {
      fold_row<K>(s, eG_t, u_t, k, n, sh.sw, utile + rl, ustride, skeys, lane);
      store_slice<K>(state + size_t(r) * K, lane, s);
    } else if (lane == 0) {
      entry_n[r] = from_f32<E>(u_t);
    }
  }
}

template <int K, int V, class E, bool COMPACT>
__global__ void __launch_bounds__(kThreads, 6) gdn_kvbuffer_split_state_kernel(GdnKVBufferParams p, int rows) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  extern __shared__ __align__(128) float tile[];  // [rows, K] S0 rows, then the fold's keys and u tile
  __shared__ __align__(16) SplitStateShared sh;
  const GdnStepIO& io = p.io;
  BlockCoords c = block_coords<V>(rows);
  const int chunks = rows / kGroups;
  const int C = p.capacity;
  if constexpr (!COMPACT) {
    const int slot = io.slot[c.row], n = p.row_fill[c.row];
    const bool has_state = p.row_has_state[c.row] != 0;
    if (!state_kernel_row(slot, n, has_state, C)) return;  // kernel A wrote the zero output / finished the token
    if (has_state && threadIdx.x == 0) tile_init(chunks, sh.bars);
    split_state_row<K, V, E>(p, rows, c, slot, n, has_state, 0, tile, sh);
  } else {
    constexpr int kPer = kCompactMaxBatch / kThreads, kWarps = kThreads / 32;
    __shared__ int s_count[kPer][kWarps];       // rows needing kernel B per (chunk of rows, warp)
    __shared__ int16_t s_rows[kCompactMaxBatch];  // this block's rows, in rank order
    const int B = io.batch, G = gridDim.z, g = blockIdx.z;
    const int warp = threadIdx.x / 32, wl = threadIdx.x % 32;
    // Every row's metadata is loaded before any is tested (one round trip, not a chain).
    int slot_of[kPer], fill_of[kPer], has_of[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int row = i * kThreads + threadIdx.x;
      slot_of[i] = -1, fill_of[i] = 0, has_of[i] = 0;
      if (row < B) slot_of[i] = io.slot[row], fill_of[i] = p.row_fill[row], has_of[i] = p.row_has_state[row];
    }
    unsigned work = 0;  // bit i: row i * kThreads + threadIdx.x needs kernel B
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (state_kernel_row(slot_of[i], fill_of[i], has_of[i] != 0, C)) work |= 1u << i;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const unsigned m = __ballot_sync(0xffffffffu, (work >> i) & 1u);
      if (wl == 0) s_count[i][warp] = __popc(m);
    }
    if (threadIdx.x == 0) tile_init(chunks, sh.bars);
    __syncthreads();
    int before = 0;  // rows needing kernel B ahead of chunk i
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const unsigned m = __ballot_sync(0xffffffffu, (work >> i) & 1u);
      int rank = before + __popc(m & ((1u << wl) - 1u));
      for (int w = 0; w < warp; ++w) rank += s_count[i][w];
      if (((work >> i) & 1u) && rank % G == g) s_rows[rank / G] = int16_t(i * kThreads + threadIdx.x);
      for (int w = 0; w < kWarps; ++w) before += s_count[i][w];
    }
    __syncthreads();
    const int mine = before > g ? (before - g + G - 1) / G : 0;
    uint32_t parity = 0;
    for (int t = 0; t < mine; ++t) {
      if (t > 0) {
        __syncthreads();  // the previous row's tile, sv, sr, ss and sw are consumed
        // Generic-proxy reads of the tile precede the next bulk (async-proxy) writes to it.
        if (threadIdx.x == 0) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      }
      c.row = s_rows[t];
      const int slot = io.slot[c.row], n = p.row_fill[c.row];
      const bool has_state = p.row_has_state[c.row] != 0;
      split_state_row<K, V, E>(p, rows, c, slot, n, has_state, parity, tile, sh);
      if (has_state) parity ^= 1u;
    }
  }
}

// The single kernel's dynamic shared memory: the tile and buffer staging, then (16-byte aligned,
// at rows_offset) the per-row arrays: barriers, v, outputs, appended entries.
struct SingleSmemLayout {
  size_t rows_offset, bytes;
};
SingleSmemLayout kvbuffer_smem_layout(const GdnKVBufferParams& p, int rows) {
  const size_t C = size_t(p.capacity), K = size_t(p.io.K);
  const size_t esz = p.entry == GdnEntryType::FP32 ? 4 : 2;
  const bool raw = p.variant == GdnBufferVariant::Raw;
  size_t bytes = size_t(rows) * K * 4 + C * K * esz + 4 * C * 4;
  if (raw)
    bytes += (C * C + 2 * C + size_t(kGroups) * C) * 4;
  else
    bytes += C * size_t(rows + kUtilePad) * esz;
  const size_t rows_offset = (bytes + 15) / 16 * 16;
  return {rows_offset, rows_offset + kMaxChunks * sizeof(uint64_t) + size_t(rows) * (2 + 2 + esz)};
}

template <int K, int V, class E, bool RAW>
void launch_kvbuffer(const GdnKVBufferParams& p, int rows, cudaStream_t stream) {
  const dim3 grid = decode_grid(p.io, rows);
  const SingleSmemLayout layout = kvbuffer_smem_layout(p, rows);
  launch_kernel(gdn_decode_kvbuffer_kernel<K, V, E, RAW>, grid, dim3(kThreads), layout.bytes, stream, false, p, rows,
                int(layout.rows_offset));
}

template <int K, class E>
size_t split_state_smem_bytes(const GdnKVBufferParams& p, int rows) {
  const size_t C = size_t(p.capacity);
  return size_t(rows) * K * sizeof(float) + C * K * sizeof(E) + C * size_t(rows + kUtilePad) * sizeof(E);
}

// Kernel B's row groups G, or 0 for one block row per request (the plain kernel). compact_allowed:
// the direct entry point, for at most kCompactMaxBatch rows. split_row_groups, or as many groups as one wave of blocks holds, taken
// from C = kCompactMinCapacity where the plain grid would run kCompactMinWaves waves or more
// (B / G: its blocks mostly exit; log v21).
template <int K, int V, class E>
int split_state_row_groups(const GdnKVBufferParams& p, int rows, bool compact_allowed) {
  if (!compact_allowed || p.io.batch > kCompactMaxBatch) return 0;
  long groups = p.split_row_groups;
  if (!groups && p.capacity >= kCompactMinCapacity) {
    const dim3 grid = decode_grid(p.io, rows);
    const int per_sm = resident_blocks(gdn_kvbuffer_split_state_kernel<K, V, E, true>, kThreads,
                                       split_state_smem_bytes<K, E>(p, rows));
    groups = long(multiprocessor_count()) * per_sm / (long(grid.x) * grid.y);
    if (p.io.batch < kCompactMinWaves * groups) groups = 0;
  }
  return groups > 0 && groups < p.io.batch ? int(groups) : 0;
}

template <int K, int V, class E>
void launch_split(const GdnKVBufferParams& p, int rows, bool compact_allowed, cudaStream_t stream) {
  const int R = p.io.HV / p.io.H;
  const size_t C = size_t(p.capacity);
  const size_t smem_a = R * C * V * sizeof(E) + (2 * C + 2 * R * C + 2 * size_t(R)) * sizeof(float);
  launch_kernel(gdn_kvbuffer_split_buffer_kernel<K, V, E>, dim3(unsigned(long(p.io.batch) * p.io.H)), dim3(kThreads),
                smem_a, stream, false, p);
  const size_t smem_b = split_state_smem_bytes<K, E>(p, rows);
  // Programmatic dependent launch: B may start once every block of A has started (A triggers at
  // entry); B's griddepcontrol.wait orders its reads of A's scratch.
  dim3 grid = decode_grid(p.io, rows);
  const int groups = split_state_row_groups<K, V, E>(p, rows, compact_allowed);
  if (!groups)
    return launch_kernel(gdn_kvbuffer_split_state_kernel<K, V, E, false>, grid, dim3(kThreads), smem_b, stream, true,
                         p, rows);
  grid.z = unsigned(groups);
  launch_kernel(gdn_kvbuffer_split_state_kernel<K, V, E, true>, grid, dim3(kThreads), smem_b, stream, true, p, rows);
}

template <int K, int V>
void dispatch_entry(const GdnKVBufferParams& p, int rows, bool split, bool compact_allowed, cudaStream_t stream) {
  const bool raw = p.variant == GdnBufferVariant::Raw;
  if (split) {
    switch (p.entry) {
      case GdnEntryType::BF16:
        return launch_split<K, V, __nv_bfloat16>(p, rows, compact_allowed, stream);
      case GdnEntryType::FP32:
        return launch_split<K, V, float>(p, rows, compact_allowed, stream);
      default:
        throw std::invalid_argument("gdn_decode_kvbuffer: unsupported entry type");
    }
  }
  switch (p.entry) {
    case GdnEntryType::BF16:
      return raw ? launch_kvbuffer<K, V, __nv_bfloat16, true>(p, rows, stream)
                 : launch_kvbuffer<K, V, __nv_bfloat16, false>(p, rows, stream);
    case GdnEntryType::FP32:
      return raw ? launch_kvbuffer<K, V, float, true>(p, rows, stream)
                 : launch_kvbuffer<K, V, float, false>(p, rows, stream);
    default:
      throw std::invalid_argument("gdn_decode_kvbuffer: unsupported entry type");
  }
}

// Whether this launch takes the split path, and its rows per block.
struct LaunchShape {
  bool split;
  int rows;
};
bool split_possible(const GdnKVBufferParams& p) {
  return p.variant == GdnBufferVariant::CachedU && p.row_fill && p.scratch;
}
// Capacity 1 (header, "Capacity 1"): the recurrent kernels, where the row metadata gives has_state.
bool capacity1_route(const GdnKVBufferParams& p) {
  return p.capacity == 1 && p.row_has_state && p.path == GdnDecodePath::Auto;
}
LaunchShape launch_shape(const GdnKVBufferParams& p, int split_min_capacity) {
  const bool split = p.path == GdnDecodePath::Split ||
                     (p.path == GdnDecodePath::Auto && split_possible(p) && p.io.batch >= kSplitMinBatch &&
                      p.capacity >= split_min_capacity);
  return {split, choose_rows_per_block(p.io, split ? split_state_rows(p.capacity) : kSingleKVBufferRows)};
}

void run_kvbuffer(const GdnKVBufferParams& p, cudaStream_t stream, const char* who, int split_min_capacity,
                  bool direct_entry) {
  validate_step_io(p.io, who, false);
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (p.capacity < 1 || p.capacity > kMaxCapacity)
    fail("unsupported capacity " + std::to_string(p.capacity) + " (1.." + std::to_string(kMaxCapacity) + ")");
  if (!p.state || !p.buf_k || !p.buf_val || !p.buf_gcum)
    fail("state, buf_k, buf_val and buf_gcum must be set");
  if (bool(p.row_fill) != bool(p.row_has_state)) fail("give both row_fill and row_has_state, or neither");
  if (!p.row_fill && !(p.fill && p.has_state && p.done_count))
    fail("without row_fill/row_has_state, fill, has_state and done_count must be set");
  if (p.variant == GdnBufferVariant::Raw && !p.buf_beta) fail("the raw variant needs buf_beta");
  if (p.path == GdnDecodePath::Split && !split_possible(p))
    fail("the split path needs the cached-u variant, row_fill/row_has_state and scratch");
  if (p.split_row_groups < 0) fail("split_row_groups must be >= 0");
  if (direct_entry && p.every_row_has_state) fail("every_row_has_state contradicts direct mode");
  if (p.io.batch == 0) return;
  if (capacity1_route(p)) return run_kvbuffer_capacity1(p, stream, who);
  const LaunchShape shape = launch_shape(p, split_min_capacity);
  dispatch_head_dims(who, p.io.K, p.io.V, [&](auto K, auto V) {
    dispatch_entry<K, V>(p, shape.rows, shape.split, direct_entry, stream);
  });
}

}  // namespace gdn_detail

void gdn_decode_kvbuffer(const GdnKVBufferParams& p, cudaStream_t stream) {
  gdn_detail::run_kvbuffer(p, stream, "gdn_decode_kvbuffer", gdn_detail::kSplitMinCapacityKVBuffer, false);
}

void gdn_decode_direct(const GdnKVBufferParams& p, cudaStream_t stream) {
  gdn_detail::run_kvbuffer(p, stream, "gdn_decode_direct", gdn_detail::kSplitMinCapacityDirect, true);
}

int gdn_decode_kvbuffer_rows_per_block(const GdnKVBufferParams& p) {
  if (gdn_detail::capacity1_route(p)) return gdn_detail::recurrent_rows(p.io);
  return gdn_detail::launch_shape(p, gdn_detail::kSplitMinCapacityKVBuffer).rows;
}

int gdn_decode_direct_rows_per_block(const GdnKVBufferParams& p) {
  if (gdn_detail::capacity1_route(p)) return gdn_detail::recurrent_rows(p.io);
  return gdn_detail::launch_shape(p, gdn_detail::kSplitMinCapacityDirect).rows;
}

int gdn_decode_direct_row_groups(const GdnKVBufferParams& p) {
  using namespace gdn_detail;
  if (capacity1_route(p)) return 0;
  const LaunchShape shape = launch_shape(p, kSplitMinCapacityDirect);
  if (!shape.split) return 0;
  const bool bf16 = p.entry == GdnEntryType::BF16;
  return dispatch_head_dims("gdn_decode_direct_row_groups", p.io.K, p.io.V, [&](auto K, auto V) {
    return bf16 ? split_state_row_groups<K, V, __nv_bfloat16>(p, shape.rows, true)
                : split_state_row_groups<K, V, float>(p, shape.rows, true);
  });
}

}  // namespace kvbuf
