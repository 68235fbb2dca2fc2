// What a speculative verify's commit keeps: the same for both families and both methods.
#pragma once
#include <cstdint>

namespace kvbuf {

// Per row: accept_len [B] in 0..T (clamped), and accept_nodes [B, T], the 1-based nodes of the
// accepted root path in order (first accept_len entries used; each must be the parent of the
// next, the first a child of 0). accept_nodes null = the chain prefix 1..m.
struct VerifyAccept {
  const int32_t* accept_len = nullptr;
  const int32_t* accept_nodes = nullptr;
};

}  // namespace kvbuf
