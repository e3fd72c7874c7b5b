package alfworld

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/jetrl/jetrl/proto"
)

// Generation bounds; a room holds few enough objects that admissible lists stay ALFWorld-short.
const (
	maxPerReceptacle = 4
	maxAttempts      = 10_000
	heldoutModulus   = 5
)

// splitStream separates the random streams of the two splits, so seed 7 of train and of heldout differ.
func splitStream(split string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("alfworld/" + split))
	return h.Sum64()
}

// generate draws the instance of (split, seed): a room and goal whose split key falls in the split, then
// the placements. The key covers everything the opening shows, so no opening occurs in both splits.
func generate(split string, seed uint64) (*game, error) {
	rng := rand.New(rand.NewPCG(seed, splitStream(split)))
	wantHeldout := split == proto.SplitHeldout
	for range maxAttempts {
		g, ok := drawRoomAndGoal(rng)
		if !ok {
			continue
		}
		if (g.splitKey()%heldoutModulus == 0) != wantHeldout {
			continue
		}
		g.place(rng)
		g.opening = g.open()
		return g, nil
	}
	return nil, errors.New("alfworld: no instance found for this split and seed")
}

// splitKey hashes the task type, the goal and the room layout.
func (g *game) splitKey() uint64 {
	names := make([]string, len(g.receps))
	for i, r := range g.receps {
		names[i] = r.name
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s|%s|%s", g.kind, g.goalObj, g.goalRecep, strings.Join(names, ","))
	return h.Sum64()
}

// drawRoomAndGoal picks the task type, the room's receptacles and the goal; ok is false when the room
// cannot host any goal of that type (the caller draws again).
func drawRoomAndGoal(rng *rand.Rand) (*game, bool) {
	k := kind(rng.IntN(int(numKinds)))
	all := scenes()
	sc := all[0] // clean, heat and cool need the kitchen's sinkbasin, microwave and fridge
	switch {
	case k == lookAtObjInLight:
		sc = all[1]
	case k == pickAndPlace && rng.IntN(2) == 1:
		sc = all[1]
	}
	g := &game{kind: k, scene: sc, loc: -1, held: -1, lamp: -1}
	g.layout(rng)

	present := map[string]bool{}
	for _, r := range g.receps {
		present[r.kind] = true
	}
	type goal struct{ obj, dest string }
	var goals []goal
	for _, o := range sc.objs {
		if t := k.targets(); t != nil && !slices.Contains(t, o.kind) {
			continue
		}
		starts := intersect(o.at, present)
		if k == lookAtObjInLight {
			if len(starts) > 0 {
				goals = append(goals, goal{o.kind, ""})
			}
			continue
		}
		for _, d := range starts {
			// a changed object goes somewhere sensible: not back into an appliance, the sink or the bin
			if d == k.appliance() || (k != pickAndPlace && (d == "garbagecan" || d == sinkbasin)) {
				continue
			}
			if len(starts) > 1 { // the object must start somewhere other than the goal receptacle
				goals = append(goals, goal{o.kind, d})
			}
		}
	}
	if len(goals) == 0 {
		return nil, false
	}
	gl := goals[rng.IntN(len(goals))]
	g.goalObj, g.goalRecep = gl.obj, gl.dest
	return g, true
}

// layout draws a room of minReceps..maxReceps receptacles within the scene's per-kind bounds.
func (g *game) layout(rng *rand.Rand) {
	specs := g.scene.receps
	counts := make([]int, len(specs))
	total := 0
	for i, s := range specs {
		counts[i] = s.min
		total += s.min
	}
	if len(g.scene.lampOn) > 0 { // some receptacle must carry the desklamp
		holder := g.scene.lampOn[rng.IntN(len(g.scene.lampOn))]
		for i, s := range specs {
			if s.kind == holder && counts[i] == 0 {
				counts[i]++
				total++
			}
		}
	}
	want := minReceps + rng.IntN(maxReceps-minReceps+1)
	for total < want {
		i := rng.IntN(len(specs))
		if counts[i] < specs[i].max {
			counts[i]++
			total++
		}
	}
	for i, s := range specs {
		for n := 1; n <= counts[i]; n++ {
			g.receps = append(g.receps, recep{name: fmt.Sprintf("%s %d", s.kind, n), kind: s.kind, openable: s.openable})
		}
	}
}

// place puts the desklamp, one or two goal objects (never already in a goal receptacle) and distractors.
func (g *game) place(rng *rand.Rand) {
	numbers := map[string]int{}
	add := func(kind string, choices []int, fixed bool) {
		open := slices.DeleteFunc(slices.Clone(choices), func(r int) bool {
			return len(g.receps[r].contents) >= maxPerReceptacle
		})
		if len(open) == 0 {
			return
		}
		r := open[rng.IntN(len(open))]
		numbers[kind]++
		g.objs = append(g.objs, object{name: fmt.Sprintf("%s %d", kind, numbers[kind]), kind: kind, at: r, fixed: fixed})
		g.receps[r].contents = append(g.receps[r].contents, len(g.objs)-1)
	}
	if len(g.scene.lampOn) > 0 {
		add(desklamp, g.recepsOf(g.scene.lampOn), true)
		g.lamp = len(g.objs) - 1
	}
	goalStarts := slices.DeleteFunc(g.recepsOf(g.spec(g.goalObj).at), func(r int) bool {
		return g.receps[r].kind == g.goalRecep
	})
	for range 1 + rng.IntN(3)/2 {
		add(g.goalObj, goalStarts, false)
	}
	for range 3 + rng.IntN(len(g.receps)) {
		o := g.scene.objs[rng.IntN(len(g.scene.objs))]
		if o.kind == g.goalObj {
			continue
		}
		add(o.kind, g.recepsOf(o.at), false)
	}
	g.recepIndex = make(map[string]int, len(g.receps))
	for i, r := range g.receps {
		g.recepIndex[r.name] = i
	}
	g.objIndex = make(map[string]int, len(g.objs))
	for i, o := range g.objs {
		g.objIndex[o.name] = i
	}
}

// spec is the scene's entry for an object kind.
func (g *game) spec(kind string) objSpec {
	for _, o := range g.scene.objs {
		if o.kind == kind {
			return o
		}
	}
	return objSpec{kind: kind}
}

// recepsOf lists the room's receptacles of the given kinds, in room order.
func (g *game) recepsOf(kinds []string) []int {
	var out []int
	for i, r := range g.receps {
		if slices.Contains(kinds, r.kind) {
			out = append(out, i)
		}
	}
	return out
}

// intersect keeps the kinds that are present, in their listed order.
func intersect(kinds []string, present map[string]bool) []string {
	var out []string
	for _, k := range kinds {
		if present[k] {
			out = append(out, k)
		}
	}
	return out
}
