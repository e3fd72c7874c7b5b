package codec_test

import (
	"fmt"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
)

// benchEpisode is an ALFWorld-sized episode: turns turns, each with an observation and 12 candidates.
func benchEpisode(turns int) proto.Episode {
	ep := proto.Episode{Schema: proto.SchemaVersion, ID: "Gx4fOZ9yQ2lBw1s0T2cD3k-3", GroupID: "Gx4fOZ9yQ2lBw1s0T2cD3k", GroupSize: 8,
		Task: "alfworld", Split: proto.SplitTrain, Seed: 0x1234567890, Instruction: "Your task is to: put a cool mug in cabinet.",
		Reward: 1, Status: proto.StatusCompleted, RolloutID: "r-abc", HostID: "h-def", StartedAt: 1764474000000000000, FinishedAt: 1764474000100000000, StartVersion: 41}
	for t := 0; t < turns; t++ {
		var cands []string
		for i := 1; i <= 6; i++ {
			cands = append(cands, fmt.Sprintf("take_action go to cabinet %d", i), fmt.Sprintf("take_action open drawer %d", i))
		}
		ep.Turns = append(ep.Turns, proto.Turn{Observation: "You arrive at countertop 1. On the countertop 1, you see a apple 2, a bread 1, and a mug 1.",
			Candidates: cands, Chosen: t % 12, LogProb: -1.5, Version: 41, Policy: proto.PolicyCurrent})
	}
	return ep
}

func benchTrainBatch(episodes, turns int) proto.TrainBatch {
	tb := proto.TrainBatch{Schema: proto.SchemaVersion, ID: "b-0123456789abcdef01234567", TrainerVersion: 41,
		Tasks: map[string]proto.TaskStat{"alfworld": {Episodes: episodes, Successes: 3, MeanReward: 0.4, AdvMean: 0.1, AdvStd: 0.9}}}
	for i := 0; i < episodes; i++ {
		adv := make([]float64, turns)
		for t := range adv {
			adv[t] = float64(i%8)/4 - 1
		}
		tb.Episodes = append(tb.Episodes, proto.TrainEpisode{Episode: benchEpisode(turns), Advantages: adv})
	}
	return tb
}

func BenchmarkEncodeEpisode(b *testing.B) {
	ep := benchEpisode(10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codec.Marshal(&ep, proto.MaxEpisodeBytes); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEpisode(b *testing.B) {
	ep := benchEpisode(10)
	data, err := codec.Marshal(&ep, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var out proto.Episode
		if err := codec.Unmarshal(data, &out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeTrainBatch(b *testing.B) {
	tb := benchTrainBatch(64, 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codec.Marshal(&tb, proto.MaxBatchBytes); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTrainBatch(b *testing.B) {
	tb := benchTrainBatch(64, 10)
	data, err := codec.Marshal(&tb, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var out proto.TrainBatch
		if err := codec.Unmarshal(data, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnvStep is the codec work of one env step as the mesh does it: the client encodes the request,
// the host decodes it, encodes the reply (an ALFWorld-sized observation and 12 admissible calls), and the
// client decodes that.
func BenchmarkEnvStep(b *testing.B) {
	req := proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: "h-abc-123", Call: proto.ToolCall{Name: "take_action", Arguments: `{"action":"go to fridge 1"}`}}
	rep := proto.EnvStepReply{Schema: proto.SchemaVersion, Observation: "You arrive at fridge 1. The fridge 1 is closed.", Status: proto.StatusRunning, Turn: 3}
	for i := 1; i <= 6; i++ {
		rep.Admissible = append(rep.Admissible, proto.ToolCall{Name: "take_action", Arguments: fmt.Sprintf(`{"action":"go to cabinet %d"}`, i)},
			proto.ToolCall{Name: "take_action", Arguments: fmt.Sprintf(`{"action":"open drawer %d"}`, i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		data, err := codec.Marshal(req, proto.MaxEnvMessageBytes)
		if err != nil {
			b.Fatal(err)
		}
		var gotReq proto.EnvStepRequest
		if err := codec.Unmarshal(data, &gotReq); err != nil {
			b.Fatal(err)
		}
		if data, err = codec.Marshal(rep, proto.MaxEnvMessageBytes); err != nil {
			b.Fatal(err)
		}
		var gotRep proto.EnvStepReply
		if err := codec.Unmarshal(data, &gotRep); err != nil {
			b.Fatal(err)
		}
	}
}
