package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// doorGame is a tiny text game: open the door the instruction names ("doors"), or first take the key
// the observation names and then open it ("keys"). Held-out instances use colors and keys never seen
// in training, so only features that generalize across instances can solve them.
type doorGame struct {
	task, door, key string
	doors, keys     []string
	held            string // key in hand
	turn, maxTurns  int
	obs             string
	done            bool
	reward          float64
}

var (
	trainColors = []string{"red", "blue", "green", "yellow", "purple", "orange", "white", "black"}
	heldColors  = []string{"pink", "brown", "teal", "gray"}
	trainKeys   = []string{"gold", "silver", "bronze", "iron", "copper", "brass"}
	heldKeys    = []string{"jade", "bone", "glass"}
)

// pick returns k distinct elements of from, in random order.
func pick(rng *rand.Rand, from []string, k int) []string {
	p := rng.Perm(len(from))[:k]
	out := make([]string, k)
	for i, j := range p {
		out[i] = from[j]
	}
	return out
}

func newDoorGame(rng *rand.Rand, task string, heldout bool) *doorGame {
	colors, keys := trainColors, trainKeys
	if heldout {
		// Mix unseen names into every held-out instance.
		colors = append(pick(rng, heldColors, 2), pick(rng, trainColors, 2)...)
		keys = append(pick(rng, heldKeys, 2), pick(rng, trainKeys, 2)...)
	}
	g := &doorGame{task: task, doors: pick(rng, colors, 3), maxTurns: 3}
	g.door = g.doors[0]
	rng.Shuffle(len(g.doors), func(i, j int) { g.doors[i], g.doors[j] = g.doors[j], g.doors[i] })
	g.obs = fmt.Sprintf("You are in a hall with %s, %s and %s doors.", g.doors[0], g.doors[1], g.doors[2])
	if task == "keys" {
		g.keys = pick(rng, keys, 3)
		g.key = g.keys[0]
		rng.Shuffle(len(g.keys), func(i, j int) { g.keys[i], g.keys[j] = g.keys[j], g.keys[i] })
		g.obs = g.locked()
		g.maxTurns = 4
	}
	return g
}

func (g *doorGame) locked() string {
	return fmt.Sprintf("The %s door is locked. It opens with the %s key.", g.door, g.key)
}

func (g *doorGame) input(history []string) Input {
	var cands []string
	for _, k := range g.keys {
		cands = append(cands, "take "+k+" key")
	}
	for _, d := range g.doors {
		cands = append(cands, "open "+d+" door")
	}
	cands = append(cands, "look")
	return Input{Task: g.task, Instruction: "Open the " + g.door + " door.", Observation: g.obs,
		History: HistoryWindow(history), Candidates: cands}
}

func (g *doorGame) step(call string) {
	g.turn++
	var verb, name string
	fmt.Sscanf(call, "%s %s", &verb, &name)
	switch {
	case verb == "take":
		g.held = name
		g.obs = "You take the " + name + " key."
	case verb == "open" && name != g.door:
		g.done = true
	case verb == "open" && g.task == "keys" && g.held != g.key:
		g.obs = g.locked()
	case verb == "open":
		g.done, g.reward = true, 1
	default:
		g.obs = "Nothing happens."
	}
	if g.turn >= g.maxTurns {
		g.done = true
	}
}

type played struct {
	inputs  []Input
	choices []int
	reward  float64
}

// play runs one episode, sampling when rng is set and acting greedily otherwise.
func play(m *Model, g *doorGame, rng *rand.Rand) played {
	var ep played
	var history []string
	for !g.done {
		in := g.input(history)
		var c int
		if rng != nil {
			c, _ = m.Sample(in, rng)
		} else {
			c, _ = m.Greedy(in)
		}
		ep.inputs, ep.choices = append(ep.inputs, in), append(ep.choices, c)
		history = append(history, in.Candidates[c])
		g.step(in.Candidates[c])
	}
	ep.reward = g.reward
	return ep
}

func heldoutSuccess(m *Model, task string, n int) float64 {
	rng := rand.New(rand.NewPCG(99, 99))
	var wins float64
	for range n {
		wins += play(m, newDoorGame(rng, task, true), nil).reward
	}
	return wins / float64(n)
}

// TestLearnsDoorGames trains with plain REINFORCE (advantage = reward − task mean of the batch) and
// checks greedy success on held-out instances with unseen colors and keys.
func TestLearnsDoorGames(t *testing.T) {
	start := time.Now()
	cfg := Config{Seed: 1}
	cfg.SetDefaults()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opt := NewAdam(m.NumParams(), AdamConfig{})
	grad := make([]float64, m.NumParams())
	rng := rand.New(rand.NewPCG(1, 2))
	tasks := []string{"doors", "keys"}
	const batch, maxEpisodes = 32, 4000
	for _, task := range tasks {
		t.Logf("before: %s held-out success %.2f", task, heldoutSuccess(m, task, 200))
	}
	episodes := 0
	for episodes < maxEpisodes {
		eps := make([]played, batch)
		mean := map[string]float64{}
		for i := range eps {
			task := tasks[i%len(tasks)]
			eps[i] = play(m, newDoorGame(rng, task, false), rng)
			mean[task] += eps[i].reward / float64(batch/len(tasks))
		}
		clear(grad)
		for i, ep := range eps {
			adv := ep.reward - mean[tasks[i%len(tasks)]]
			for k, in := range ep.inputs {
				// Ascend advantage · log π: the loss gradient is −advantage · ∇log π.
				m.AccumulateGrad(in, ep.choices[k], -adv/batch, grad)
			}
		}
		if err := opt.Step(m.Weights, grad); err != nil {
			t.Fatal(err)
		}
		episodes += batch
		if episodes%(batch*25) == 0 && heldoutSuccess(m, "doors", 100) > 0.95 && heldoutSuccess(m, "keys", 100) > 0.95 {
			break
		}
	}
	for _, task := range tasks {
		s := heldoutSuccess(m, task, 300)
		t.Logf("after %d episodes (%v): %s held-out success %.2f", episodes, time.Since(start).Round(time.Millisecond), task, s)
		if s < 0.9 {
			t.Errorf("%s: held-out greedy success %.2f after %d episodes, want > 0.9", task, s, episodes)
		}
	}
}
