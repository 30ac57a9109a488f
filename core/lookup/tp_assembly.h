// The TP step of the host placements' lookups: each TP rank of a replica
// holds one block of the heads (core/lookup/tp_heads.h) and has looked up,
// for the replica's tokens, the rows its block holds; the TP group then
// assembles every token's heads as the engines do: an all-gather of the
// blocks (every TP rank gets every token's heads), or with sequence
// parallelism an all-to-all by token shard (TP rank t gets tokens
// [t*s, (t+1)*s), s = ceil(tokens / tp), every head, zero rows past the
// last token).
//
// Every TP rank of a replica brings the same ids (the engines hand the
// replica's ids to each of its TP ranks). A first small all-gather of
// [layer, world rank, token count, ids digest] lets every member see when a
// peer brought other ids, another table, or a request it could not serve,
// and fail the step alike instead of exchanging mismatched buffers.
//
// The row-id rule holds across blocks: an in-table id at a head position of
// one block whose row another block holds (hashing never makes one) is
// served by the holder in a second all-gather, run only when such an id
// exists: every member derives the same list from the shared ids.
#pragma once

#include <cstdint>
#include <span>

#include "core/backend/collectives.h"
#include "core/base/status.h"
#include "core/lookup/lookup_types.h"
#include "core/lookup/tp_heads.h"

namespace engram {

// The header exchange. Every TP rank calls it, also when its own request
// is malformed or overran its slot (`own_error`), so its peers finish: a
// rank with an error gets that error back; the others get
// failed_precondition naming the first peer that could not take part or
// brought other ids or another table (peer = its world rank). A group of
// one returns own_error without a collective.
Status agree_tp_step(Collectives& tp_group, const LookupRequest& request, const Status& own_error);

// The data exchange, after agree_tp_step returned ok on every member.
// local: [tokens][heads][dim] for the request's tokens, holding at least
// (a) at every head position of this rank's block: the row when the block
// holds it, zero when the id reads no row; (b) at a head position outside
// the block whose row the block holds: that row. Writes request.output
// (every token, or this rank's token shard under sequence parallelism).
Status exchange_tp_heads(Collectives& tp_group, const LookupRequest& request, const TpHeadBlocks& blocks,
                         std::span<const uint16_t> local);

}  // namespace engram
