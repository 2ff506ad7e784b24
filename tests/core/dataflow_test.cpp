// The dependency oracle (core/dataflow.hpp) on a two-encoder model: edges along the module
// DAG, the frozen rule of Eq 3.3, and what each pass reads and writes.
#include "core/dataflow.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace loom {
namespace {

// vision (2 layers, frozen) and audio (1 layer, trainable) feed llm (2 layers, frozen):
// global layers vision 0-1, audio 2, llm 3-4.
Model two_encoders() {
  return Model({test::tiny_module("vision", ModuleKind::kEncoder, 2, true),
                test::tiny_module("audio", ModuleKind::kEncoder, 1, false),
                test::tiny_module("llm", ModuleKind::kLlm, 2, true, {"vision", "audio"})});
}

Compute op(Pass pass, int first, int end) {
  return Compute{.pass = pass,
                 .stage = StageId{0},
                 .microbatch = MicrobatchId{3},
                 .module = ModuleId{0},
                 .first_layer = first,
                 .end_layer = end};
}

TEST(Dataflow, ProducersAndConsumersFollowTheModuleDag) {
  const Model model = two_encoders();
  const LayerGraph g(model);
  EXPECT_EQ(g.producers(0), std::vector<int>{});
  EXPECT_EQ(g.producers(1), std::vector<int>{0});
  EXPECT_EQ(g.producers(3), (std::vector<int>{1, 2}));  // the fan-in, in global order
  EXPECT_EQ(g.consumers(1), std::vector<int>{3});
  EXPECT_EQ(g.consumers(2), std::vector<int>{3});
  EXPECT_TRUE(g.is_loss_layer(4));
  EXPECT_FALSE(g.is_loss_layer(2));
}

TEST(Dataflow, OnlyLayersWithSomethingTrainableUpstreamBackpropagate) {
  const Model model = two_encoders();
  const LayerGraph g(model);
  EXPECT_FALSE(g.needs_backward(0));  // frozen vision: nothing trainable upstream
  EXPECT_FALSE(g.needs_backward(1));
  EXPECT_TRUE(g.needs_backward(2));  // the trainable audio layer
  EXPECT_TRUE(g.needs_backward(3));  // frozen, but audio is upstream
  const LayerGraph naive(model, BackwardRule::kEveryLayer);
  EXPECT_TRUE(naive.needs_backward(0));
}

TEST(Dataflow, ForwardReadsItsProducersAndWritesItsConsumers) {
  const Model model = two_encoders();
  const LayerGraph g(model);
  const auto in = op_inputs(g, op(Pass::kF, 3, 5));
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0], (DataEdge{Pass::kF, MicrobatchId{3}, 1, 3}));
  EXPECT_EQ(in[1], (DataEdge{Pass::kF, MicrobatchId{3}, 2, 3}));
  EXPECT_TRUE(op_outputs(g, op(Pass::kF, 3, 5)).empty());  // the loss layer
  EXPECT_EQ(op_outputs(g, op(Pass::kF, 0, 2)),
            (std::vector<DataEdge>{{Pass::kF, MicrobatchId{3}, 1, 3}}));
}

TEST(Dataflow, BackwardSendsGradientsOnlyWhereABackwardWaits) {
  const Model model = two_encoders();
  const LayerGraph g(model);
  // The LLM's backward owes a gradient to audio (trainable) but not to frozen vision.
  EXPECT_EQ(op_outputs(g, op(Pass::kI, 3, 5)),
            (std::vector<DataEdge>{{Pass::kB, MicrobatchId{3}, 2, 3}}));
  EXPECT_EQ(op_inputs(g, op(Pass::kB, 2, 3)),
            (std::vector<DataEdge>{{Pass::kB, MicrobatchId{3}, 2, 3}}));
  // Frozen vision needs no gradient; W moves no data at all.
  EXPECT_TRUE(op_inputs(g, op(Pass::kB, 0, 2)).empty());
  EXPECT_TRUE(op_inputs(g, op(Pass::kW, 3, 5)).empty());
  EXPECT_TRUE(op_outputs(g, op(Pass::kW, 3, 5)).empty());
}

TEST(Dataflow, AMessageTagNamesExactlyOneEdge) {
  const MessageTag tag{
      .pass = Pass::kB, .microbatch = MicrobatchId{2}, .boundary_layer = 3, .producer_layer = 2};
  EXPECT_EQ(edge_of(tag), (DataEdge{Pass::kB, MicrobatchId{2}, 2, 3}));
  const MessageTag within{.pass = Pass::kF,
                          .microbatch = MicrobatchId{0},
                          .boundary_layer = 4,
                          .producer_layer = std::nullopt};
  EXPECT_EQ(edge_of(within).producer, 3);  // -1 means the previous layer
}

}  // namespace
}  // namespace loom
