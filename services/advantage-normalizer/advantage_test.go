package normalizer_test

import (
	"errors"
	"math"
	"testing"

	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
)

const eps = normalizer.Epsilon

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func nearAll(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestGroupAdvantages(t *testing.T) {
	sqrt3over4 := math.Sqrt(0.1875) // std of {1, 0, 0, 0}: variance (0.75² + 3·0.25²)/4
	tests := []struct {
		name        string
		given       []float64
		expected    []float64
		expectedErr error
	}{
		{name: "empty group", given: nil, expected: nil},
		{name: "win and loss", given: []float64{1, 0}, expected: []float64{0.5 / (0.5 + eps), -0.5 / (0.5 + eps)}},
		{name: "one win of four", given: []float64{1, 0, 0, 0},
			expected: []float64{0.75 / (sqrt3over4 + eps), -0.25 / (sqrt3over4 + eps), -0.25 / (sqrt3over4 + eps), -0.25 / (sqrt3over4 + eps)}},
		{name: "shaped loss", given: []float64{1, -0.2}, expected: []float64{0.6 / (0.6 + eps), -0.6 / (0.6 + eps)}},
		{name: "fractional rewards", given: []float64{0.5, 0.25, 0}, // mean 0.25, std sqrt(0.125/3)
			expected: []float64{0.25 / (math.Sqrt(0.125/3) + eps), 0, -0.25 / (math.Sqrt(0.125/3) + eps)}},
		{name: "all zeros", given: []float64{0, 0, 0, 0, 0, 0, 0, 0}, expected: []float64{0, 0, 0, 0, 0, 0, 0, 0}},
		{name: "all equal wins", given: []float64{1, 1, 1}, expected: []float64{0, 0, 0}},
		{name: "single member", given: []float64{0.7}, expected: []float64{0}},
		{name: "NaN", given: []float64{1, math.NaN()}, expectedErr: normalizer.ErrNonFinite},
		{name: "+Inf", given: []float64{math.Inf(1), 0}, expectedErr: normalizer.ErrNonFinite},
		{name: "-Inf", given: []float64{0, math.Inf(-1)}, expectedErr: normalizer.ErrNonFinite},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalizer.GroupAdvantages(tc.given)
			if !errors.Is(err, tc.expectedErr) {
				t.Fatalf("error = %v, want %v", err, tc.expectedErr)
			}
			if tc.expectedErr != nil {
				return
			}
			if !nearAll(got, tc.expected) {
				t.Fatalf("GroupAdvantages(%v) = %v, want %v", tc.given, got, tc.expected)
			}
			for _, a := range got {
				if math.IsNaN(a) || math.IsInf(a, 0) {
					t.Fatalf("non-finite advantage in %v", got)
				}
			}
		})
	}
}

func TestTaskNormalize(t *testing.T) {
	// Task a: action-level advantages {1, 1, -1}: mean 1/3, std sqrt(8/9) (population).
	stdA := math.Sqrt(8.0 / 9.0)
	// Task b: {4, 2, 2, 2, 4}: mean 2.8, variance (1.2²·2 + 0.8²·3)/5 = 0.96.
	stdB := math.Sqrt(0.96)
	tests := []struct {
		name          string
		givenTasks    []string
		givenAdv      [][]float64
		expectedAdv   [][]float64
		expectedStats map[string][2]float64
		expectedErr   error
	}{
		{
			name:       "longer episodes weigh more",
			givenTasks: []string{"a", "a"},
			givenAdv:   [][]float64{{1, 1}, {-1}},
			expectedAdv: [][]float64{
				{(1 - 1.0/3) / (stdA + eps), (1 - 1.0/3) / (stdA + eps)},
				{(-1 - 1.0/3) / (stdA + eps)},
			},
			expectedStats: map[string][2]float64{"a": {1.0 / 3, stdA}},
		},
		{
			name:       "tasks are normalized apart",
			givenTasks: []string{"a", "b", "a", "b"},
			givenAdv:   [][]float64{{1, 1}, {4}, {-1}, {2, 2, 2, 4}},
			expectedAdv: [][]float64{
				{(2.0 / 3) / (stdA + eps), (2.0 / 3) / (stdA + eps)},
				{1.2 / (stdB + eps)},
				{(-4.0 / 3) / (stdA + eps)},
				{-0.8 / (stdB + eps), -0.8 / (stdB + eps), -0.8 / (stdB + eps), 1.2 / (stdB + eps)},
			},
			expectedStats: map[string][2]float64{"a": {1.0 / 3, stdA}, "b": {2.8, stdB}},
		},
		{
			name:          "a task with one sample in the batch",
			givenTasks:    []string{"solo"},
			givenAdv:      [][]float64{{0.8}},
			expectedAdv:   [][]float64{{0}},
			expectedStats: map[string][2]float64{"solo": {0.8, 0}},
		},
		{
			name:          "a task with one single-turn sample next to another task",
			givenTasks:    []string{"solo", "a", "a"},
			givenAdv:      [][]float64{{-3}, {1, 1}, {-1}},
			expectedAdv:   [][]float64{{0}, {(2.0 / 3) / (stdA + eps), (2.0 / 3) / (stdA + eps)}, {(-4.0 / 3) / (stdA + eps)}},
			expectedStats: map[string][2]float64{"solo": {-3, 0}, "a": {1.0 / 3, stdA}},
		},
		{
			name:          "all-zero advantages stay zero",
			givenTasks:    []string{"a", "a"},
			givenAdv:      [][]float64{{0, 0}, {0}},
			expectedAdv:   [][]float64{{0, 0}, {0}},
			expectedStats: map[string][2]float64{"a": {0, 0}},
		},
		{
			name:          "episodes without turns are skipped",
			givenTasks:    []string{"a", "a", "e"},
			givenAdv:      [][]float64{{1, 1}, {-1}, {}},
			expectedAdv:   [][]float64{{(2.0 / 3) / (stdA + eps), (2.0 / 3) / (stdA + eps)}, {(-4.0 / 3) / (stdA + eps)}, {}},
			expectedStats: map[string][2]float64{"a": {1.0 / 3, stdA}},
		},
		{name: "NaN", givenTasks: []string{"a", "a"}, givenAdv: [][]float64{{1}, {math.NaN()}}, expectedErr: normalizer.ErrNonFinite},
		{name: "Inf", givenTasks: []string{"a"}, givenAdv: [][]float64{{math.Inf(1), 0}}, expectedErr: normalizer.ErrNonFinite},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stats, err := normalizer.TaskNormalize(tc.givenTasks, tc.givenAdv)
			if !errors.Is(err, tc.expectedErr) {
				t.Fatalf("error = %v, want %v", err, tc.expectedErr)
			}
			if tc.expectedErr != nil {
				return
			}
			for i := range tc.expectedAdv {
				if !nearAll(tc.givenAdv[i], tc.expectedAdv[i]) {
					t.Fatalf("episode %d advantages = %v, want %v", i, tc.givenAdv[i], tc.expectedAdv[i])
				}
			}
			if len(stats) != len(tc.expectedStats) {
				t.Fatalf("stats = %v, want %v", stats, tc.expectedStats)
			}
			for task, want := range tc.expectedStats {
				if got, ok := stats[task]; !ok || !near(got[0], want[0]) || !near(got[1], want[1]) {
					t.Fatalf("stats[%s] = %v, want %v", task, got, want)
				}
			}
		})
	}
}

func TestTaskNormalizeLengthMismatch(t *testing.T) {
	if _, err := normalizer.TaskNormalize([]string{"a"}, [][]float64{{1}, {2}}); err == nil {
		t.Fatal("TaskNormalize accepted 1 task for 2 episodes")
	}
}

func TestShapedReward(t *testing.T) {
	tests := []struct {
		givenStatus    string
		givenReward    float64
		givenAbnormal  float64
		expectedReward float64
	}{
		{proto.StatusCompleted, 1, -0.2, 1},
		{proto.StatusCompleted, 0, -0.2, 0},
		{proto.StatusCompleted, 0.35, -0.2, 0.35},
		{proto.StatusTurnLimit, 0, -0.2, -0.2},
		{proto.StatusTurnLimit, 0.9, -0.2, -0.2},
		{proto.StatusInvalidAction, 0, -0.2, -0.2},
		{proto.StatusInvalidAction, 0, -0.5, -0.5},
		{proto.StatusTurnLimit, 0, 0, 0},
		{proto.StatusError, 0, -0.2, 0},
	}
	for _, tc := range tests {
		ep := proto.Episode{Status: tc.givenStatus, Reward: tc.givenReward}
		if got := normalizer.ShapedReward(&ep, tc.givenAbnormal); got != tc.expectedReward {
			t.Errorf("ShapedReward(%s, reward %v, abnormal %v) = %v, want %v", tc.givenStatus, tc.givenReward, tc.givenAbnormal, got, tc.expectedReward)
		}
	}
	if normalizer.DefaultAbnormalReward != -0.2 {
		t.Fatalf("DefaultAbnormalReward = %v, want the paper's -0.2", normalizer.DefaultAbnormalReward)
	}
}

// episode builds a valid episode with n turns.
func episode(id, group, task string, size, turns int, status string, reward float64) proto.Episode {
	ep := proto.Episode{Schema: proto.SchemaVersion, ID: id, GroupID: group, GroupSize: size, Task: task,
		Split: proto.SplitTrain, Status: status, Reward: reward}
	for range turns {
		ep.Turns = append(ep.Turns, proto.Turn{Observation: "o", Candidates: []string{"a", "b"}, Chosen: 0, LogProb: -math.Ln2, Policy: proto.PolicyCurrent})
	}
	return ep
}

func smallBatch() *proto.Batch {
	return &proto.Batch{Schema: proto.SchemaVersion, ID: "b-1", TrainerVersion: 7, Episodes: []proto.Episode{
		// Group g1 (alfworld): a win in 2 turns and a turn-limit loss in 3: shaped {1, -0.2}.
		episode("g1-0", "g1", "alfworld", 2, 2, proto.StatusCompleted, 1),
		episode("g1-1", "g1", "alfworld", 2, 3, proto.StatusTurnLimit, 0),
		// Group g2 (webshop): fractional rewards {0.5, 0}, one turn each.
		episode("g2-0", "g2", "webshop", 2, 1, proto.StatusCompleted, 0.5),
		episode("g2-1", "g2", "webshop", 2, 1, proto.StatusCompleted, 0),
	}}
}

func TestAdvantagesWithoutTaskNorm(t *testing.T) {
	tb, err := normalizer.Advantages(smallBatch(), normalizer.Options{AbnormalReward: -0.2})
	if err != nil {
		t.Fatal(err)
	}
	a1 := 0.6 / (0.6 + eps)   // g1: mean 0.4, std 0.6
	a2 := 0.25 / (0.25 + eps) // g2: mean 0.25, std 0.25
	want := [][]float64{{a1, a1}, {-a1, -a1, -a1}, {a2}, {-a2}}
	if tb.ID != "b-1" || tb.TrainerVersion != 7 || tb.Schema != proto.SchemaVersion || len(tb.Episodes) != 4 {
		t.Fatalf("train batch header = id %s version %d schema %d episodes %d", tb.ID, tb.TrainerVersion, tb.Schema, len(tb.Episodes))
	}
	for i, te := range tb.Episodes {
		if te.Episode.ID != smallBatch().Episodes[i].ID {
			t.Fatalf("episode %d is %s: order changed", i, te.Episode.ID)
		}
		if !nearAll(te.Advantages, want[i]) {
			t.Fatalf("episode %s advantages = %v, want %v (group advantage broadcast to every turn)", te.Episode.ID, te.Advantages, want[i])
		}
	}
	al := tb.Tasks["alfworld"]
	if al.Episodes != 2 || al.Successes != 1 || !near(al.MeanReward, 0.5) || al.AdvMean != 0 || al.AdvStd != 0 {
		t.Fatalf("alfworld stats = %+v", al)
	}
	ws := tb.Tasks["webshop"]
	if ws.Episodes != 2 || ws.Successes != 0 || !near(ws.MeanReward, 0.25) {
		t.Fatalf("webshop stats = %+v (a reward of 0.5 is not a success)", ws)
	}
}

func TestAdvantagesWithTaskNorm(t *testing.T) {
	tb, err := normalizer.Advantages(smallBatch(), normalizer.Options{AbnormalReward: -0.2, TaskNorm: true})
	if err != nil {
		t.Fatal(err)
	}
	// alfworld turns: {a, a, -a, -a, -a}: mean -a/5, std sqrt(0.96)·a.
	a := 0.6 / (0.6 + eps)
	mean, std := -a/5, math.Sqrt(0.96)*a
	up, down := (a-mean)/(std+eps), (-a-mean)/(std+eps)
	// webshop turns: {b, -b}: mean 0, std b.
	b := 0.25 / (0.25 + eps)
	want := [][]float64{{up, up}, {down, down, down}, {b / (b + eps)}, {-b / (b + eps)}}
	for i, te := range tb.Episodes {
		if !nearAll(te.Advantages, want[i]) {
			t.Fatalf("episode %s advantages = %v, want %v", te.Episode.ID, te.Advantages, want[i])
		}
	}
	if st := tb.Tasks["alfworld"]; !near(st.AdvMean, mean) || !near(st.AdvStd, std) {
		t.Fatalf("alfworld stats = %+v, want adv mean %v std %v", st, mean, std)
	}
	if st := tb.Tasks["webshop"]; !near(st.AdvMean, 0) || !near(st.AdvStd, b) {
		t.Fatalf("webshop stats = %+v, want adv mean 0 std %v", st, b)
	}
}

func TestAdvantagesRefusesBadBatches(t *testing.T) {
	tests := []struct {
		name        string
		givenEdit   func(b *proto.Batch)
		expectedErr error
	}{
		{"infrastructure failure in the batch", func(b *proto.Batch) { b.Episodes[1].InfraFailure = true }, proto.ErrMalformed},
		{"NaN reward", func(b *proto.Batch) { b.Episodes[0].Reward = math.NaN() }, proto.ErrBadNumber},
		{"Inf reward", func(b *proto.Batch) { b.Episodes[2].Reward = math.Inf(1) }, proto.ErrBadNumber},
		{"positive log-probability", func(b *proto.Batch) { b.Episodes[0].Turns[0].LogProb = 0.5 }, proto.ErrBadNumber},
		{"chosen out of range", func(b *proto.Batch) { b.Episodes[0].Turns[1].Chosen = 2 }, proto.ErrMalformed},
		{"old schema episode", func(b *proto.Batch) { b.Episodes[3].Schema = 0 }, proto.ErrSchema},
		{"episode without group", func(b *proto.Batch) { b.Episodes[3].GroupID = "" }, proto.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := smallBatch()
			tc.givenEdit(b)
			if _, err := normalizer.Advantages(b, normalizer.Options{AbnormalReward: -0.2, TaskNorm: true}); !errors.Is(err, tc.expectedErr) {
				t.Fatalf("error = %v, want %v", err, tc.expectedErr)
			}
		})
	}
}

func TestAdvantagesOfEmptyBatch(t *testing.T) {
	tb, err := normalizer.Advantages(&proto.Batch{Schema: proto.SchemaVersion, ID: "empty"}, normalizer.Options{TaskNorm: true})
	if err != nil {
		t.Fatal(err)
	}
	if tb.ID != "empty" || len(tb.Episodes) != 0 || len(tb.Tasks) != 0 {
		t.Fatalf("empty batch gave %+v", tb)
	}
}

// A flat group (all rewards equal) gets FlatGroupCoef·(r − mean of its task's shaped rewards in the
// batch); groups whose rewards differ keep their GRPO advantages; with the coefficient 0 a flat group gets
// zeros.
func TestAdvantagesOfFlatGroups(t *testing.T) {
	b := smallBatch()
	b.Episodes = append(b.Episodes,
		// g3 (alfworld): both failed, completed with reward 0. g4 (alfworld): both turn-limit, shaped -0.2.
		episode("g3-0", "g3", "alfworld", 2, 1, proto.StatusCompleted, 0),
		episode("g3-1", "g3", "alfworld", 2, 2, proto.StatusCompleted, 0),
		episode("g4-0", "g4", "alfworld", 2, 1, proto.StatusTurnLimit, 0),
		episode("g4-1", "g4", "alfworld", 2, 1, proto.StatusTurnLimit, 0),
		// g5 (webshop): both 0.5.
		episode("g5-0", "g5", "webshop", 2, 1, proto.StatusCompleted, 0.5),
		episode("g5-1", "g5", "webshop", 2, 1, proto.StatusCompleted, 0.5),
	)
	// alfworld shaped rewards {1, -0.2, 0, 0, -0.2, -0.2}: mean 0.4/6; webshop {0.5, 0, 0.5, 0.5}: mean 0.375.
	alMean, wsMean := 0.4/6, 0.375
	a1, a2 := 0.6/(0.6+eps), 0.25/(0.25+eps)
	tb, err := normalizer.Advantages(b, normalizer.Options{AbnormalReward: -0.2, FlatGroupCoef: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	g3, g4, g5 := 0.5*(0-alMean), 0.5*(-0.2-alMean), 0.5*(0.5-wsMean)
	want := [][]float64{{a1, a1}, {-a1, -a1, -a1}, {a2}, {-a2}, {g3}, {g3, g3}, {g4}, {g4}, {g5}, {g5}}
	for i, te := range tb.Episodes {
		if !nearAll(te.Advantages, want[i]) {
			t.Fatalf("episode %s advantages = %v, want %v", te.Episode.ID, te.Advantages, want[i])
		}
	}
	tb, err = normalizer.Advantages(b, normalizer.Options{AbnormalReward: -0.2})
	if err != nil {
		t.Fatal(err)
	}
	for _, te := range tb.Episodes[4:] {
		if !nearAll(te.Advantages, make([]float64, len(te.Advantages))) {
			t.Fatalf("episode %s advantages = %v without the flat group coefficient, want zeros", te.Episode.ID, te.Advantages)
		}
	}
	for _, c := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		cfg := normalizer.DefaultConfig()
		cfg.FlatGroupCoef = c
		if err := cfg.Validate(); err == nil {
			t.Fatalf("flat group coef %v validated", c)
		}
	}
}
