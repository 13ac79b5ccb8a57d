/* generated from dx1_bringup/spec by `make rtl`; do not edit */
/*
 * dx1-mini host links, spec version 1.4: the UART bridge's frames
 * and the simulator socket (docs/link.md).  Bridge fields are big-endian, simulator
 * fields little-endian; CRC-32 is zlib's crc32 (IEEE 802.3, reflected).
 */
#ifndef DX1_LINK_H
#define DX1_LINK_H

/* UART bridge: the first byte of every frame */
enum dx1_frame {
    DX1_FRAME_UARTBONE_WRITE       = 0x01,
    DX1_FRAME_UARTBONE_READ        = 0x02,
    DX1_FRAME_UARTBONE_WRITE_FIXED = 0x03,
    DX1_FRAME_UARTBONE_READ_FIXED  = 0x04,
    DX1_FRAME_BURST_WRITE          = 0x81,
    DX1_FRAME_BURST_READ           = 0x82,
    DX1_FRAME_REG_WRITE            = 0x83,
    DX1_FRAME_REG_READ             = 0x84,
};

/* UART bridge: the status byte that answers a burst or a CRC register frame */
enum dx1_frame_status {
    DX1_FRAME_ACK       = 0x00,  /* Done. */
    DX1_FRAME_NAK_CRC   = 0x01,  /* A header, payload or frame CRC was wrong: nothing was written, and the bridge ignores the line until it has been quiet for TIMEOUT_BITS bit times. */
    DX1_FRAME_NAK_RANGE = 0x02,  /* Address or length refused: nothing was done. */
    DX1_FRAME_BUS_ERROR = 0x03,  /* The AXI bus answered an error (a write: every word was tried, the refused ones not written). */
};

/* Simulator socket: request op codes */
enum dx1_sim_op {
    DX1_SIM_CLOSE       = 0x00,
    DX1_SIM_READ32      = 0x01,
    DX1_SIM_WRITE32     = 0x02,
    DX1_SIM_READ_BLOCK  = 0x03,
    DX1_SIM_WRITE_BLOCK = 0x04,
    DX1_SIM_WAIT_IRQ    = 0x05,
    DX1_SIM_CYCLES      = 0x06,
    DX1_SIM_STALL       = 0x07,
    DX1_SIM_BUDGET      = 0x08,
    DX1_SIM_CUT         = 0x09,
};

/* Simulator socket: response status codes */
enum dx1_sim_status {
    DX1_SIM_OK          = 0x00,
    DX1_SIM_BUS_ERROR   = 0x01,
    DX1_SIM_BAD_REQUEST = 0x02,
    DX1_SIM_STUCK       = 0x03,
};

/* Header sizes (a burst header is followed by its CRC) and limits */
#define DX1_UARTBONE_HEADER_BYTES 6
#define DX1_BURST_HEADER_BYTES    9
#define DX1_REG_HEADER_BYTES      6
#define DX1_SIM_REQUEST_BYTES     9
#define DX1_SIM_RESPONSE_BYTES    5
#define DX1_UARTBONE_MAX_WORDS    255u
#define DX1_REG_MAX_WORDS         255u
#define DX1_BURST_MAX_PAYLOAD     4096u
#define DX1_AXI_ERROR_WORD        0xffffffffu
#define DX1_REG_BASE              0x00000000u
#define DX1_REG_BYTES             0x00010000u
#define DX1_MEM_BASE              0x80000000u
#define DX1_BRIDGE_RX_FIFO        16u
#define DX1_TIMEOUT_BITS          1000u
#define DX1_CRC_POLY              0xedb88320u
#define DX1_CRC_BYTES             4u
#define DX1_WORD_BYTES            4u
#define DX1_SIM_IRQ_WAIT_CYCLES   20000u
#define DX1_SIM_MAX_BLOCK         0x00100000u
#define DX1_SIM_REQUEST_CYCLES    200000u
#define DX1_SIM_CYCLES_PER_BYTE   16u

#endif /* DX1_LINK_H */
