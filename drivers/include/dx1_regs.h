/* generated from dx1_bringup/spec by `make rtl`; do not edit */
/*
 * dx1-mini register map and command encoding, spec version 1.4.
 *
 * Registers are 32 bits wide.  Every register block starts with ID, VERSION and
 * NEXT (byte offset of the next block, 0 after the last); a driver finds the
 * blocks by walking NEXT from offset 0.  The DX1_*_BASE macros give the
 * placement for the configuration this header was generated for.
 *
 * A command is DX1_CMD_BYTES bytes read as one little-endian integer.  In a
 * uint64_t cmd[DX1_CMD_WORDS] buffer, cmd[i] holds bits [64*i+63:64*i]; store
 * each word little-endian.  Every bit that no field of the opcode names is
 * reserved and must be 0, so start from a zeroed buffer:
 *
 *     uint64_t cmd[DX1_CMD_WORDS] = {0};
 *     DX1_CMD_SET(cmd, OPCODE, DX1_OP_GEMM);
 *     DX1_CMD_SET(cmd, GEMM_M, 16);
 *     DX1_CMD_SET(cmd, FLAGS, 1u << DX1_CMD_GEMM_FLAG_ACCUMULATE_BIT);
 */
#ifndef DX1_REGS_H
#define DX1_REGS_H

#include <stdint.h>

/* C11's _Static_assert, C++11's static_assert: the header serves C drivers and the C++ simulator server. */
#ifdef __cplusplus
#define DX1_STATIC_ASSERT static_assert
#else
#define DX1_STATIC_ASSERT _Static_assert
#endif

/* Identity */
#define DX1_MAGIC        0x44583131u
#define DX1_SPEC_VERSION 0x00010004u
#define DX1_BLOCK_ALIGN  0x0100u

/* The configuration this header was generated for */
#define DX1_TILES       2
#define DX1_ARRAY       8
#define DX1_SPM_ROWS    4096
#define DX1_ACC_ROWS    1024
#define DX1_MEM_BYTES   0x00100000u
#define DX1_SEMAPHORES  16
#define DX1_TRACE_DEPTH 256
#define DX1_BUS_BYTES   8

/* Block types (read from each block's ID register) and block versions */
#define DX1_BLOCK_GLOBAL_ID      0x44580001u
#define DX1_BLOCK_GLOBAL_VERSION 0x00010000u
#define DX1_BLOCK_QUEUE_ID       0x44580002u
#define DX1_BLOCK_QUEUE_VERSION  0x00010000u
#define DX1_BLOCK_PERF_ID        0x44580003u
#define DX1_BLOCK_PERF_VERSION   0x00010000u
#define DX1_BLOCK_TRACE_ID       0x44580004u
#define DX1_BLOCK_TRACE_VERSION  0x00010000u
#define DX1_BLOCK_LINK_ID        0x44580005u
#define DX1_BLOCK_LINK_VERSION   0x00010000u

/* Absolute block bases; per-tile blocks are DX1_<BLOCK>_BASE(tile) */
#define DX1_GLOBAL_BASE   0x0000u
#define DX1_QUEUE_STRIDE  0x0100u
#define DX1_QUEUE_BASE(t) (0x0100u + (uint32_t)(t) * DX1_QUEUE_STRIDE)
#define DX1_PERF_STRIDE   0x0100u
#define DX1_PERF_BASE(t)  (0x0300u + (uint32_t)(t) * DX1_PERF_STRIDE)
#define DX1_TRACE_STRIDE  0x0100u
#define DX1_TRACE_BASE(t) (0x0500u + (uint32_t)(t) * DX1_TRACE_STRIDE)
#define DX1_LINK_BASE     0x0700u
#define DX1_MAP_BYTES     0x0800u

/*
 * GLOBAL block (one per device): Identity, capabilities and device-wide controls. Offsets within
 * the block.
 */
#define DX1_GLOBAL_ID                    0x00u
#define DX1_GLOBAL_VERSION               0x04u
#define DX1_GLOBAL_NEXT                  0x08u
#define DX1_GLOBAL_MAGIC                 0x0cu
#define DX1_GLOBAL_HW_VERSION            0x10u
#define DX1_GLOBAL_CAPS                  0x14u
#define DX1_GLOBAL_CAPS_TILES_SHIFT      0
#define DX1_GLOBAL_CAPS_TILES_MASK       0x0000000fu
#define DX1_GLOBAL_CAPS_ARRAY_SHIFT      4
#define DX1_GLOBAL_CAPS_ARRAY_MASK       0x000001f0u
#define DX1_GLOBAL_CAPS_MEM_BANKS_SHIFT  9
#define DX1_GLOBAL_CAPS_MEM_BANKS_MASK   0x00003e00u
#define DX1_GLOBAL_CAPS_SEMAPHORES_SHIFT 16
#define DX1_GLOBAL_CAPS_SEMAPHORES_MASK  0x01ff0000u
#define DX1_GLOBAL_CAPS_LINK_PORTS_SHIFT 25
#define DX1_GLOBAL_CAPS_LINK_PORTS_MASK  0x06000000u
#define DX1_GLOBAL_SPM_ROWS              0x18u
#define DX1_GLOBAL_ACC_ROWS              0x1cu
#define DX1_GLOBAL_MEM_BYTES             0x20u
#define DX1_GLOBAL_FEATURES              0x24u
#define DX1_GLOBAL_FEATURES_POSTOP_SHIFT 0
#define DX1_GLOBAL_FEATURES_POSTOP_MASK  0x00000001u
#define DX1_GLOBAL_FEATURES_COPY_SHIFT   1
#define DX1_GLOBAL_FEATURES_COPY_MASK    0x00000002u
#define DX1_GLOBAL_FEATURES_TRACE_SHIFT  2
#define DX1_GLOBAL_FEATURES_TRACE_MASK   0x00000004u
#define DX1_GLOBAL_FEATURES_VECTOR_SHIFT 3
#define DX1_GLOBAL_FEATURES_VECTOR_MASK  0x00000008u
#define DX1_GLOBAL_FEATURES_LINK_SHIFT   4
#define DX1_GLOBAL_FEATURES_LINK_MASK    0x00000010u
#define DX1_GLOBAL_SCRATCH               0x28u
#define DX1_GLOBAL_CYCLES_LO             0x2cu
#define DX1_GLOBAL_CYCLES_HI             0x30u
#define DX1_GLOBAL_RESET                 0x34u
#define DX1_GLOBAL_RESET_ALL_SHIFT       0
#define DX1_GLOBAL_RESET_ALL_MASK        0x00000001u
#define DX1_GLOBAL_SEM_COUNT             16
#define DX1_GLOBAL_SEM(i)                (0x38u + 4u * (uint32_t)(i))
#define DX1_GLOBAL_SEM_VALUE_SHIFT       0
#define DX1_GLOBAL_SEM_VALUE_MASK        0x0000ffffu
#define DX1_GLOBAL_CHIP_ID               0x78u
#define DX1_GLOBAL_CHIP_ID_RANK_SHIFT    0
#define DX1_GLOBAL_CHIP_ID_RANK_MASK     0x000000ffu
#define DX1_GLOBAL_CHIP_ID_CHIPS_SHIFT   8
#define DX1_GLOBAL_CHIP_ID_CHIPS_MASK    0x0000ff00u

/* QUEUE block (one per tile): One command queue, feeding one tile. Offsets within the block. */
#define DX1_QUEUE_ID                          0x00u
#define DX1_QUEUE_VERSION                     0x04u
#define DX1_QUEUE_NEXT                        0x08u
#define DX1_QUEUE_RING_BASE                   0x0cu
#define DX1_QUEUE_RING_BASE_ADDR_SHIFT        5
#define DX1_QUEUE_RING_BASE_ADDR_MASK         0xffffffe0u
#define DX1_QUEUE_RING_LOG2                   0x10u
#define DX1_QUEUE_RING_LOG2_LOG2_SHIFT        0
#define DX1_QUEUE_RING_LOG2_LOG2_MASK         0x0000001fu
#define DX1_QUEUE_CQ_BASE                     0x14u
#define DX1_QUEUE_CQ_BASE_ADDR_SHIFT          3
#define DX1_QUEUE_CQ_BASE_ADDR_MASK           0xfffffff8u
#define DX1_QUEUE_HEAD                        0x18u
#define DX1_QUEUE_HEAD_INDEX_SHIFT            0
#define DX1_QUEUE_HEAD_INDEX_MASK             0x0000ffffu
#define DX1_QUEUE_TAIL                        0x1cu
#define DX1_QUEUE_TAIL_INDEX_SHIFT            0
#define DX1_QUEUE_TAIL_INDEX_MASK             0x0000ffffu
#define DX1_QUEUE_DOORBELL                    0x20u
#define DX1_QUEUE_DOORBELL_INDEX_SHIFT        0
#define DX1_QUEUE_DOORBELL_INDEX_MASK         0x0000ffffu
#define DX1_QUEUE_CONTROL                     0x24u
#define DX1_QUEUE_CONTROL_ENABLE_SHIFT        0
#define DX1_QUEUE_CONTROL_ENABLE_MASK         0x00000001u
#define DX1_QUEUE_CONTROL_RESUME_SHIFT        1
#define DX1_QUEUE_CONTROL_RESUME_MASK         0x00000002u
#define DX1_QUEUE_STATUS                      0x28u
#define DX1_QUEUE_STATUS_BUSY_SHIFT           0
#define DX1_QUEUE_STATUS_BUSY_MASK            0x00000001u
#define DX1_QUEUE_STATUS_HALTED_SHIFT         1
#define DX1_QUEUE_STATUS_HALTED_MASK          0x00000002u
#define DX1_QUEUE_STATUS_RESETTING_SHIFT      2
#define DX1_QUEUE_STATUS_RESETTING_MASK       0x00000004u
#define DX1_QUEUE_ERROR                       0x2cu
#define DX1_QUEUE_ERROR_CODE_SHIFT            0
#define DX1_QUEUE_ERROR_CODE_MASK             0x000000ffu
#define DX1_QUEUE_ERROR_INDEX_SHIFT           16
#define DX1_QUEUE_ERROR_INDEX_MASK            0xffff0000u
#define DX1_QUEUE_IRQ_STATUS                  0x30u
#define DX1_QUEUE_IRQ_STATUS_COMPLETION_SHIFT 0
#define DX1_QUEUE_IRQ_STATUS_COMPLETION_MASK  0x00000001u
#define DX1_QUEUE_IRQ_STATUS_ERROR_SHIFT      1
#define DX1_QUEUE_IRQ_STATUS_ERROR_MASK       0x00000002u
#define DX1_QUEUE_IRQ_MASK                    0x34u
#define DX1_QUEUE_IRQ_MASK_COMPLETION_SHIFT   0
#define DX1_QUEUE_IRQ_MASK_COMPLETION_MASK    0x00000001u
#define DX1_QUEUE_IRQ_MASK_ERROR_SHIFT        1
#define DX1_QUEUE_IRQ_MASK_ERROR_MASK         0x00000002u
#define DX1_QUEUE_DMA_BASE                    0x38u
#define DX1_QUEUE_DMA_LIMIT                   0x3cu
#define DX1_QUEUE_DMA_LIMIT_LIMIT_SHIFT       0
#define DX1_QUEUE_DMA_LIMIT_LIMIT_MASK        0xffffffffu
#define DX1_QUEUE_WATCHDOG                    0x40u
#define DX1_QUEUE_WATCHDOG_CYCLES_SHIFT       0
#define DX1_QUEUE_WATCHDOG_CYCLES_MASK        0xffffffffu
#define DX1_QUEUE_RESET                       0x44u
#define DX1_QUEUE_RESET_TILE_SHIFT            0
#define DX1_QUEUE_RESET_TILE_MASK             0x00000001u

/*
 * PERF block (one per tile): Performance counters of one tile (32-bit, wrapping). Offsets within
 * the block.
 */
#define DX1_PERF_ID                  0x00u
#define DX1_PERF_VERSION             0x04u
#define DX1_PERF_NEXT                0x08u
#define DX1_PERF_CONTROL             0x0cu
#define DX1_PERF_CONTROL_CLEAR_SHIFT 0
#define DX1_PERF_CONTROL_CLEAR_MASK  0x00000001u
#define DX1_PERF_CYCLES              0x10u
#define DX1_PERF_BUSY_LOAD           0x14u
#define DX1_PERF_BUSY_COMPUTE        0x18u
#define DX1_PERF_BUSY_STORE          0x1cu
#define DX1_PERF_MACS_LO             0x20u
#define DX1_PERF_MACS_HI             0x24u
#define DX1_PERF_STALL_DEP           0x28u
#define DX1_PERF_STALL_MEM           0x2cu
#define DX1_PERF_BYTES_READ          0x30u
#define DX1_PERF_BYTES_WRITTEN       0x34u
#define DX1_PERF_BUSY_VECTOR         0x38u
#define DX1_PERF_TABLE_HITS          0x3cu
#define DX1_PERF_TABLE_UNDERFLOWS    0x40u
#define DX1_PERF_TABLE_OVERFLOWS     0x44u

/*
 * TRACE block (one per tile): Trace buffer of one tile: timestamped command start/end events.
 * Offsets within the block.
 */
#define DX1_TRACE_ID                   0x00u
#define DX1_TRACE_VERSION              0x04u
#define DX1_TRACE_NEXT                 0x08u
#define DX1_TRACE_CONTROL              0x0cu
#define DX1_TRACE_CONTROL_ENABLE_SHIFT 0
#define DX1_TRACE_CONTROL_ENABLE_MASK  0x00000001u
#define DX1_TRACE_CONTROL_CLEAR_SHIFT  1
#define DX1_TRACE_CONTROL_CLEAR_MASK   0x00000002u
#define DX1_TRACE_COUNT                0x10u
#define DX1_TRACE_DATA_LO              0x14u
#define DX1_TRACE_DATA_HI              0x18u
#define DX1_TRACE_DATA_HI_TAG_SHIFT    0
#define DX1_TRACE_DATA_HI_TAG_MASK     0x0000ffffu
#define DX1_TRACE_DATA_HI_STATUS_SHIFT 16
#define DX1_TRACE_DATA_HI_STATUS_MASK  0x00ff0000u
#define DX1_TRACE_DATA_HI_OPCODE_SHIFT 24
#define DX1_TRACE_DATA_HI_OPCODE_MASK  0x7f000000u
#define DX1_TRACE_DATA_HI_END_SHIFT    31
#define DX1_TRACE_DATA_HI_END_MASK     0x80000000u

/*
 * LINK block (one per device): The chip-to-chip link ports (`spec/chip_link.py`): parameters, the
 * receive window, control and counters, one register of each array per port (0: next chip, 1:
 * previous chip).  A chip without a link (CAPS.link_ports = 0) reads 0 in every register here but
 * WINDOW_BASE, WINDOW_LIMIT and CONTROL, which store what is written and act on nothing. Offsets
 * within the block.
 */
#define DX1_LINK_ID                          0x00u
#define DX1_LINK_VERSION                     0x04u
#define DX1_LINK_NEXT                        0x08u
#define DX1_LINK_CAPS                        0x0cu
#define DX1_LINK_CAPS_WIDTH_SHIFT            0
#define DX1_LINK_CAPS_WIDTH_MASK             0x000000ffu
#define DX1_LINK_CAPS_CREDITS_SHIFT          8
#define DX1_LINK_CAPS_CREDITS_MASK           0x0000ff00u
#define DX1_LINK_CAPS_RETRIES_SHIFT          16
#define DX1_LINK_CAPS_RETRIES_MASK           0x000f0000u
#define DX1_LINK_CAPS_MAX_PAYLOAD_LOG2_SHIFT 20
#define DX1_LINK_CAPS_MAX_PAYLOAD_LOG2_MASK  0x00f00000u
#define DX1_LINK_LATENCY                     0x10u
#define DX1_LINK_LATENCY_CYCLES_SHIFT        0
#define DX1_LINK_LATENCY_CYCLES_MASK         0x00000fffu
#define DX1_LINK_WINDOW_BASE                 0x14u
#define DX1_LINK_WINDOW_LIMIT                0x18u
#define DX1_LINK_WINDOW_LIMIT_LIMIT_SHIFT    0
#define DX1_LINK_WINDOW_LIMIT_LIMIT_MASK     0xffffffffu
#define DX1_LINK_CLEAR                       0x1cu
#define DX1_LINK_CLEAR_COUNTERS_SHIFT        0
#define DX1_LINK_CLEAR_COUNTERS_MASK         0x00000001u
#define DX1_LINK_CONTROL_COUNT               2
#define DX1_LINK_CONTROL(i)                  (0x20u + 4u * (uint32_t)(i))
#define DX1_LINK_CONTROL_FORCE_DOWN_SHIFT    0
#define DX1_LINK_CONTROL_FORCE_DOWN_MASK     0x00000001u
#define DX1_LINK_CONTROL_CORRUPT_SHIFT       8
#define DX1_LINK_CONTROL_CORRUPT_MASK        0x0000ff00u
#define DX1_LINK_STATUS_COUNT                2
#define DX1_LINK_STATUS(i)                   (0x28u + 4u * (uint32_t)(i))
#define DX1_LINK_STATUS_UP_SHIFT             0
#define DX1_LINK_STATUS_UP_MASK              0x00000001u
#define DX1_LINK_STATUS_BUSY_SHIFT           1
#define DX1_LINK_STATUS_BUSY_MASK            0x00000002u
#define DX1_LINK_TX_PACKETS_COUNT            2
#define DX1_LINK_TX_PACKETS(i)               (0x30u + 4u * (uint32_t)(i))
#define DX1_LINK_RX_PACKETS_COUNT            2
#define DX1_LINK_RX_PACKETS(i)               (0x38u + 4u * (uint32_t)(i))
#define DX1_LINK_RETRIES_COUNT               2
#define DX1_LINK_RETRIES(i)                  (0x40u + 4u * (uint32_t)(i))
#define DX1_LINK_CRC_ERRORS_COUNT            2
#define DX1_LINK_CRC_ERRORS(i)               (0x48u + 4u * (uint32_t)(i))
#define DX1_LINK_CREDIT_STALLS_COUNT         2
#define DX1_LINK_CREDIT_STALLS(i)            (0x50u + 4u * (uint32_t)(i))

/* Command opcodes (bits [7:0] of every command) */
enum dx1_opcode {
    DX1_OP_NOP       = 0x00,
    DX1_OP_LOAD      = 0x01,
    DX1_OP_STORE     = 0x02,
    DX1_OP_GEMM      = 0x03,
    DX1_OP_POSTOP    = 0x04,
    DX1_OP_FENCE     = 0x05,
    DX1_OP_SIGNAL    = 0x06,
    DX1_OP_WAIT      = 0x07,
    DX1_OP_COPY      = 0x08,
    DX1_OP_VECTOR    = 0x09,
    DX1_OP_TABLE     = 0x0a,
    DX1_OP_TRANSPOSE = 0x0b,
    DX1_OP_SEND      = 0x0c,
};

/* Completion status codes; only DX1_ERR_OK is a success */
enum dx1_error {
    DX1_ERR_OK             = 0x00,  /* The command completed. */
    DX1_ERR_BAD_OPCODE     = 0x01,  /* The opcode is not one of the defined opcodes. */
    DX1_ERR_RESERVED_BITS  = 0x02,  /* A bit that no field of this opcode defines is set. */
    DX1_ERR_BAD_DIMENSION  = 0x03,  /* A count (rows, chunks, bytes) is zero. */
    DX1_ERR_BAD_FIELD      = 0x04,  /* A scalar field is outside its legal range (for example a shift over 47). */
    DX1_ERR_SPM_RANGE      = 0x05,  /* A scratchpad row range runs past the end of the scratchpad. */
    DX1_ERR_ACC_RANGE      = 0x06,  /* An accumulator row range runs past the end of the accumulator buffer. */
    DX1_ERR_DMA_WINDOW     = 0x07,  /* A device-memory range falls outside the queue's DMA window; nothing was moved. */
    DX1_ERR_MISALIGNED     = 0x08,  /* A device-memory address or stride is not a multiple of the bus width. */
    DX1_ERR_BUS_ERROR      = 0x09,  /* The memory bus answered with an error response. */
    DX1_ERR_SEM_RANGE      = 0x0a,  /* A semaphore index is past the last semaphore. */
    DX1_ERR_RING_OVERFLOW  = 0x0b,  /* The host moved the tail past the head (queue error status, not a completion). */
    DX1_ERR_DOORBELL_RANGE = 0x0c,  /* The doorbell named an entry past the ring (queue error status, not a completion). */
    DX1_ERR_TIMEOUT        = 0x0d,  /* The queue's watchdog aborted the command: the unit running it made no progress for QUEUE.WATCHDOG cycles.  Its effect may be partial; the queue halts with this code. */
    DX1_ERR_LINK_DOWN      = 0x0e,  /* SEND: the link port is down (no peer, or LINK.CONTROL force_down at either end). Down when the SEND starts and still down 2 x LINK.LATENCY + 2 cycles later (the time a mended port takes to come up): nothing was moved; going down during it: its effect may be partial. */
    DX1_ERR_LINK_CRC       = 0x0f,  /* SEND: a frame failed its CRC on every one of its 1 + retries transmissions; what landed stays, the peer's semaphore is not signalled. */
    DX1_ERR_REMOTE_WINDOW  = 0x10,  /* SEND: the destination range falls outside the peer's link window (its LINK.WINDOW_BASE and WINDOW_LIMIT); nothing was moved at the peer, its semaphore is not signalled. */
};

/* Command size and the common header of every command */
#define DX1_CMD_BYTES        32
#define DX1_CMD_WORDS        4
#define DX1_CMD_OPCODE_LSB   0
#define DX1_CMD_OPCODE_WIDTH 8
#define DX1_CMD_FLAGS_LSB    8
#define DX1_CMD_FLAGS_WIDTH  8
#define DX1_CMD_TAG_LSB      16
#define DX1_CMD_TAG_WIDTH    16

/*
 * LOAD: 2-D strided move from device memory into the scratchpad or accumulator buffer. Outer row r,
 * column c: device memory `mem_addr + r*mem_stride + c*row_bytes` goes to local row `local_addr +
 * r*local_row_stride + c*local_col_stride`, where `row_bytes` is one local row (array size bytes in
 * the scratchpad, 4x that in the accumulator buffer).
 */
#define DX1_CMD_LOAD_MEM_ADDR_LSB           64
#define DX1_CMD_LOAD_MEM_ADDR_WIDTH         32
#define DX1_CMD_LOAD_MEM_STRIDE_LSB         96
#define DX1_CMD_LOAD_MEM_STRIDE_WIDTH       32
#define DX1_CMD_LOAD_LOCAL_ADDR_LSB         128
#define DX1_CMD_LOAD_LOCAL_ADDR_WIDTH       16
#define DX1_CMD_LOAD_ROWS_LSB               144
#define DX1_CMD_LOAD_ROWS_WIDTH             16
#define DX1_CMD_LOAD_COLS_LSB               160
#define DX1_CMD_LOAD_COLS_WIDTH             16
#define DX1_CMD_LOAD_LOCAL_ROW_STRIDE_LSB   176
#define DX1_CMD_LOAD_LOCAL_ROW_STRIDE_WIDTH 16
#define DX1_CMD_LOAD_LOCAL_COL_STRIDE_LSB   192
#define DX1_CMD_LOAD_LOCAL_COL_STRIDE_WIDTH 16
#define DX1_CMD_LOAD_FLAG_ACC_BIT           0  /* bit within the FLAGS field */

/*
 * STORE: 2-D strided move from the scratchpad or accumulator buffer to device memory; the mirror of
 * LOAD.
 */
#define DX1_CMD_STORE_MEM_ADDR_LSB           64
#define DX1_CMD_STORE_MEM_ADDR_WIDTH         32
#define DX1_CMD_STORE_MEM_STRIDE_LSB         96
#define DX1_CMD_STORE_MEM_STRIDE_WIDTH       32
#define DX1_CMD_STORE_LOCAL_ADDR_LSB         128
#define DX1_CMD_STORE_LOCAL_ADDR_WIDTH       16
#define DX1_CMD_STORE_ROWS_LSB               144
#define DX1_CMD_STORE_ROWS_WIDTH             16
#define DX1_CMD_STORE_COLS_LSB               160
#define DX1_CMD_STORE_COLS_WIDTH             16
#define DX1_CMD_STORE_LOCAL_ROW_STRIDE_LSB   176
#define DX1_CMD_STORE_LOCAL_ROW_STRIDE_WIDTH 16
#define DX1_CMD_STORE_LOCAL_COL_STRIDE_LSB   192
#define DX1_CMD_STORE_LOCAL_COL_STRIDE_WIDTH 16
#define DX1_CMD_STORE_FLAG_ACC_BIT           0  /* bit within the FLAGS field */

/*
 * GEMM: acc[c_addr + i] (+)= sum over chunks k of spm[a_addr + k*m + i] x B_k, for i < m, where n
 * is the array size and B_k is the n x n int8 matrix in spm rows b_addr + k*n .. b_addr + k*n + n -
 * 1 (row j holds B_k[j][:]). int8 x int8 products, int32 accumulation wrapping modulo 2^32.
 */
#define DX1_CMD_GEMM_A_ADDR_LSB          64
#define DX1_CMD_GEMM_A_ADDR_WIDTH        16
#define DX1_CMD_GEMM_B_ADDR_LSB          80
#define DX1_CMD_GEMM_B_ADDR_WIDTH        16
#define DX1_CMD_GEMM_C_ADDR_LSB          96
#define DX1_CMD_GEMM_C_ADDR_WIDTH        16
#define DX1_CMD_GEMM_M_LSB               112
#define DX1_CMD_GEMM_M_WIDTH             16
#define DX1_CMD_GEMM_K_CHUNKS_LSB        128
#define DX1_CMD_GEMM_K_CHUNKS_WIDTH      16
#define DX1_CMD_GEMM_FLAG_ACCUMULATE_BIT 0  /* bit within the FLAGS field */

/*
 * POSTOP: spm[dst_addr + i] = requant(acc[src_addr + i]) for i < rows.  Per lane: x = sat32(acc +
 * bias); x = max(x, 0) if relu; p = x * mult (exact); y = p >> shift rounded half away from zero
 * (shift = 0: y = p); out = saturate y to [-128, 127].  bias is the accumulator row bias_addr when
 * the bias flag is set, else 0.
 */
#define DX1_CMD_POSTOP_SRC_ADDR_LSB    64
#define DX1_CMD_POSTOP_SRC_ADDR_WIDTH  16
#define DX1_CMD_POSTOP_DST_ADDR_LSB    80
#define DX1_CMD_POSTOP_DST_ADDR_WIDTH  16
#define DX1_CMD_POSTOP_ROWS_LSB        96
#define DX1_CMD_POSTOP_ROWS_WIDTH      16
#define DX1_CMD_POSTOP_BIAS_ADDR_LSB   112
#define DX1_CMD_POSTOP_BIAS_ADDR_WIDTH 16
#define DX1_CMD_POSTOP_MULT_LSB        128
#define DX1_CMD_POSTOP_MULT_WIDTH      16
#define DX1_CMD_POSTOP_SHIFT_LSB       144
#define DX1_CMD_POSTOP_SHIFT_WIDTH     6
#define DX1_CMD_POSTOP_FLAG_RELU_BIT   0  /* bit within the FLAGS field */
#define DX1_CMD_POSTOP_FLAG_BIAS_BIT   1  /* bit within the FLAGS field */

/* SIGNAL: Adds `count` to semaphore `sem` once every earlier command of this queue has completed. */
#define DX1_CMD_SIGNAL_SEM_LSB     64
#define DX1_CMD_SIGNAL_SEM_WIDTH   8
#define DX1_CMD_SIGNAL_COUNT_LSB   72
#define DX1_CMD_SIGNAL_COUNT_WIDTH 16

/* WAIT: Waits until semaphore `sem` is at least `count`, then subtracts `count`. */
#define DX1_CMD_WAIT_SEM_LSB     64
#define DX1_CMD_WAIT_SEM_WIDTH   8
#define DX1_CMD_WAIT_COUNT_LSB   72
#define DX1_CMD_WAIT_COUNT_WIDTH 16

/* COPY: Copies `length` bytes of device memory from src_addr to dst_addr (both in the DMA window). */
#define DX1_CMD_COPY_SRC_ADDR_LSB   64
#define DX1_CMD_COPY_SRC_ADDR_WIDTH 32
#define DX1_CMD_COPY_DST_ADDR_LSB   96
#define DX1_CMD_COPY_DST_ADDR_WIDTH 32
#define DX1_CMD_COPY_LENGTH_LSB     128
#define DX1_CMD_COPY_LENGTH_WIDTH   32

/*
 * VECTOR: Vector unit: `vop` over `rows` outer rows of `cols` local rows each, every lane at once.
 * Operand X's local row for outer row r, column c is `x_addr + r*x_row_stride + c*x_col_stride` (A
 * and D: column stride 1). Elementwise vops write D(r, c) = op(A(r, c), B(r, c)); reductions write
 * one D row per outer row, every lane holding the statistic of all of A(r, :)'s lanes. Local rows
 * are read and written in order (r, then c): a read sees every earlier write of the command.
 * scratchpad lanes are int8, accumulator lanes int32; arithmetic is exact until the result is
 * saturated to D's lane type. Fields and flags a vop does not use are reserved for it
 * (`spec/vector.py`).
 */
#define DX1_CMD_VECTOR_VOP_LSB            32
#define DX1_CMD_VECTOR_VOP_WIDTH          8
#define DX1_CMD_VECTOR_SHIFT_LSB          40
#define DX1_CMD_VECTOR_SHIFT_WIDTH        6
#define DX1_CMD_VECTOR_COLS_LSB           48
#define DX1_CMD_VECTOR_COLS_WIDTH         16
#define DX1_CMD_VECTOR_A_ADDR_LSB         64
#define DX1_CMD_VECTOR_A_ADDR_WIDTH       16
#define DX1_CMD_VECTOR_B_ADDR_LSB         80
#define DX1_CMD_VECTOR_B_ADDR_WIDTH       16
#define DX1_CMD_VECTOR_D_ADDR_LSB         96
#define DX1_CMD_VECTOR_D_ADDR_WIDTH       16
#define DX1_CMD_VECTOR_ROWS_LSB           112
#define DX1_CMD_VECTOR_ROWS_WIDTH         16
#define DX1_CMD_VECTOR_A_ROW_STRIDE_LSB   128
#define DX1_CMD_VECTOR_A_ROW_STRIDE_WIDTH 16
#define DX1_CMD_VECTOR_B_ROW_STRIDE_LSB   144
#define DX1_CMD_VECTOR_B_ROW_STRIDE_WIDTH 16
#define DX1_CMD_VECTOR_B_COL_STRIDE_LSB   160
#define DX1_CMD_VECTOR_B_COL_STRIDE_WIDTH 16
#define DX1_CMD_VECTOR_D_ROW_STRIDE_LSB   176
#define DX1_CMD_VECTOR_D_ROW_STRIDE_WIDTH 16
#define DX1_CMD_VECTOR_IMM_LSB            192
#define DX1_CMD_VECTOR_IMM_WIDTH          32
#define DX1_CMD_VECTOR_IMM2_LSB           224
#define DX1_CMD_VECTOR_IMM2_WIDTH         32
#define DX1_CMD_VECTOR_FLAG_A_ACC_BIT     0  /* bit within the FLAGS field */
#define DX1_CMD_VECTOR_FLAG_B_ACC_BIT     1  /* bit within the FLAGS field */
#define DX1_CMD_VECTOR_FLAG_D_ACC_BIT     2  /* bit within the FLAGS field */

/*
 * TABLE: Loads the vector unit's lookup table: entry j (int16, little-endian) is bytes 2*(j %
 * (n/2)) and the next of scratchpad row `src_addr + j // (n/2)`, for j < TABLE_ENTRIES (n: the
 * array size). The table is the tile's and is kept across resets.
 */
#define DX1_CMD_TABLE_SRC_ADDR_LSB   64
#define DX1_CMD_TABLE_SRC_ADDR_WIDTH 16

/*
 * TRANSPOSE: For each block b < blocks: the n x n int8 block in scratchpad rows `src_addr +
 * b*src_stride` .. +n-1 is written transposed to rows `dst_addr + b*dst_stride` .. +n-1 (dst[i][j]
 * = src[j][i]), one block after the other, each read whole before it is written (n: the array
 * size).
 */
#define DX1_CMD_TRANSPOSE_SRC_ADDR_LSB     64
#define DX1_CMD_TRANSPOSE_SRC_ADDR_WIDTH   16
#define DX1_CMD_TRANSPOSE_DST_ADDR_LSB     80
#define DX1_CMD_TRANSPOSE_DST_ADDR_WIDTH   16
#define DX1_CMD_TRANSPOSE_BLOCKS_LSB       96
#define DX1_CMD_TRANSPOSE_BLOCKS_WIDTH     16
#define DX1_CMD_TRANSPOSE_SRC_STRIDE_LSB   112
#define DX1_CMD_TRANSPOSE_SRC_STRIDE_WIDTH 16
#define DX1_CMD_TRANSPOSE_DST_STRIDE_LSB   128
#define DX1_CMD_TRANSPOSE_DST_STRIDE_WIDTH 16

/*
 * SEND: Chip-to-chip DMA (`spec/chip_link.py`): sends `length` bytes of local device memory from
 * `src_addr` (in this queue's DMA window) over link `port` (0: the next chip of the ring, 1: the
 * previous one) into the peer's device memory at `dst_addr` (in the peer's link window), where `op`
 * WRITE stores them and ADD adds them as int32 lanes, wrapping; once the last byte has landed, the
 * peer adds `count` to its semaphore `sem` (count 0: no signal), and then the SEND completes here.
 * A port carries one SEND at a time. Alignment as COPY. A chip without link ports (CAPS.link_ports
 * = 0) completes SEND with BAD_OPCODE.
 */
#define DX1_CMD_SEND_OP_LSB         32
#define DX1_CMD_SEND_OP_WIDTH       4
#define DX1_CMD_SEND_PORT_LSB       40
#define DX1_CMD_SEND_PORT_WIDTH     4
#define DX1_CMD_SEND_SRC_ADDR_LSB   64
#define DX1_CMD_SEND_SRC_ADDR_WIDTH 32
#define DX1_CMD_SEND_DST_ADDR_LSB   96
#define DX1_CMD_SEND_DST_ADDR_WIDTH 32
#define DX1_CMD_SEND_LENGTH_LSB     128
#define DX1_CMD_SEND_LENGTH_WIDTH   32
#define DX1_CMD_SEND_SEM_LSB        160
#define DX1_CMD_SEND_SEM_WIDTH      8
#define DX1_CMD_SEND_COUNT_LSB      168
#define DX1_CMD_SEND_COUNT_WIDTH    16

/* Completion entry */
#define DX1_COMPLETION_BYTES           8
#define DX1_COMPLETION_TAG_LSB         0
#define DX1_COMPLETION_TAG_WIDTH       16
#define DX1_COMPLETION_STATUS_LSB      16
#define DX1_COMPLETION_STATUS_WIDTH    8
#define DX1_COMPLETION_OPCODE_LSB      24
#define DX1_COMPLETION_OPCODE_WIDTH    8
#define DX1_COMPLETION_TIMESTAMP_LSB   32
#define DX1_COMPLETION_TIMESTAMP_WIDTH 31
#define DX1_COMPLETION_PHASE_LSB       63
#define DX1_COMPLETION_PHASE_WIDTH     1

/*
 * Sets bits [lsb + width - 1:lsb] of a command to value.  Returns 0, or -1 when
 * value does not fit in width bits (the field then gets its low width bits).
 */
static inline int dx1_cmd_set(uint64_t cmd[DX1_CMD_WORDS], unsigned lsb, unsigned width, uint64_t value)
{
    /* No field straddles two words (the generator checks it), so one word holds it all. */
    uint64_t mask = width >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    unsigned shift = lsb % 64;
    cmd[lsb / 64] = (cmd[lsb / 64] & ~(mask << shift)) | ((value & mask) << shift);
    return (value & ~mask) ? -1 : 0;
}

/* Reads bits [lsb + width - 1:lsb] of a command. */
static inline uint64_t dx1_cmd_get(const uint64_t cmd[DX1_CMD_WORDS], unsigned lsb, unsigned width)
{
    uint64_t mask = width >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    return (cmd[lsb / 64] >> (lsb % 64)) & mask;
}

/* Reads bits [lsb + width - 1:lsb] of a completion entry. */
static inline uint64_t dx1_completion_get(uint64_t entry, unsigned lsb, unsigned width)
{
    uint64_t mask = width >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
    return (entry >> lsb) & mask;
}

/* DX1_CMD_SET(cmd, GEMM_M, 16) sets field DX1_CMD_GEMM_M; same return value as dx1_cmd_set(). */
#define DX1_CMD_SET(cmd, field, value) dx1_cmd_set((cmd), DX1_CMD_##field##_LSB, DX1_CMD_##field##_WIDTH, (value))
#define DX1_CMD_GET(cmd, field) dx1_cmd_get((cmd), DX1_CMD_##field##_LSB, DX1_CMD_##field##_WIDTH)
#define DX1_COMPLETION_GET(entry, field) \
    dx1_completion_get((entry), DX1_COMPLETION_##field##_LSB, DX1_COMPLETION_##field##_WIDTH)

DX1_STATIC_ASSERT(DX1_CMD_BYTES == DX1_CMD_WORDS * sizeof(uint64_t), "a command is DX1_CMD_WORDS 64-bit words");
DX1_STATIC_ASSERT(DX1_COMPLETION_BYTES == sizeof(uint64_t), "a completion entry is one 64-bit word");
DX1_STATIC_ASSERT((DX1_BLOCK_ALIGN & (DX1_BLOCK_ALIGN - 1)) == 0, "blocks are aligned to a power of two");

#endif /* DX1_REGS_H */
