// tfk-ab's oneDNN side: the primitives tfk_bench times beside tfk
// (onednn_peer.h), on tfk-ab's buffers. Built where configure finds oneDNN;
// it runs on OpenMP, whose thread count is set here.
#include <omp.h>

#include <memory>

#include "onednn_peer.h"
#include "tfk_ab.h"

namespace tfk_ab {

std::function<void()> OneDnnCall(const Problem& p, std::string* why) {
  using tfk_bench::OneDnnPeer;
  omp_set_num_threads(p.threads);
  std::shared_ptr<OneDnnPeer> peer;
  switch (p.kernel) {
    case Kernel::kSoftmax:
      peer = OneDnnPeer::Softmax(p.rows, p.cols, p.x, p.y);
      break;
    case Kernel::kLayerNorm:
      peer = OneDnnPeer::LayerNorm(p.rows, p.cols, p.x, p.gamma, p.beta, p.y);
      break;
    case Kernel::kRmsNorm:
      *why = "oneDNN's 2.x API, which tfk-ab uses, has no RMSNorm";
      return {};
    case Kernel::kAdd:
      peer = OneDnnPeer::Add(p.rows * p.cols, p.x, p.b, p.y);
      break;
    case Kernel::kActivation:
      peer = OneDnnPeer::Activation(p.act, p.rows * p.cols, p.x, p.y);
      break;
    case Kernel::kLinear:
      // One layer a call, the layers taken in turn.
      peer = OneDnnPeer::Linear(p.M, p.K, p.N, p.layers, p.x, p.w, p.y);
      break;
  }
  auto next = std::make_shared<size_t>(0);
  return [peer, next] {
    peer->Run(*next);
    *next = *next + 1 == peer->sets() ? 0 : *next + 1;
  };
}

}  // namespace tfk_ab
