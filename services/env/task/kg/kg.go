// Package kg is a knowledge-graph question-answering game after AgentBench's KG task (function-call
// version). Each instance generates a small knowledge graph (films, people, cities, companies and
// countries; relations such as film.directed_by, person.born_in, company.headquartered_in; numeric
// attributes such as city.population) and asks a multi-hop question about it: a chain of two or three
// relations, the intersection of two one-hop sets, the entity with the highest or lowest attribute after
// one or two hops, or how many entities two hops reach. The agent explores the graph with AgentBench's
// tools, get_relations, get_neighbors, intersection, get_attributes, argmax, argmin and count, whose
// results are variables #0, #1, ...; answer(variable) ends the episode, rewarded 1 when the variable holds
// exactly the gold answer (a set of entities or a number).
//
// Every relation's question phrase uses that relation's own keyword ("the people who directed X" for
// film.directed_by, "the natives of X" for city.natives), so the words of a question point at the
// relations to follow, as Freebase relation names do in AgentBench's questions. The admissible list holds
// the calls that make sense now: get_relations on the question's entities and the two latest variables;
// get_neighbors along the relations get_relations revealed for them; intersections of the two latest
// variables of one type; and, on those of the type the question asks about, the operations the question
// asks for (get_attributes and argmax or argmin along revealed attributes for "the highest" or "the
// lowest", count for "how many") and answer (on the count's number for "how many"). An agent may call
// anything else, too; a call that does not fit gets an "invalid argument" observation.
package kg

import (
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// The family's name and turn limit (AgentBench's 15 rounds).
const (
	Name     = "kg"
	MaxTurns = 15
)

// Tool names, as in AgentBench, plus answer, which commits the final variable.
const (
	toolGetRelations  = "get_relations"
	toolGetNeighbors  = "get_neighbors"
	toolIntersection  = "intersection"
	toolGetAttributes = "get_attributes"
	toolArgmax        = "argmax"
	toolArgmin        = "argmin"
	toolCount         = "count"
	toolAnswer        = "answer"
)

// toolSpec is one tool: its OpenAI form and its string arguments, all required.
type toolSpec struct {
	tool proto.Tool
	args []string
}

func toolSpecs() []toolSpec {
	return []toolSpec{
		{proto.Tool{Name: toolGetRelations,
			Description: "Fetches all relations associated with a given entity or variable, which helps in navigating the knowledge base to find useful connections.",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The entity (as named in the question) or variable (#0, #1, ...) whose relations are to be fetched."}},"required":["variable"],"additionalProperties":false}`,
		}, []string{"variable"}},
		{proto.Tool{Name: toolGetNeighbors,
			Description: "Returns all entities connected to a given entity or variable through a specified relation, as a new variable; use it after identifying valid relations with get_relations.",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The subject entity or variable to find neighbors for."},"relation":{"type":"string","description":"The relation through which neighbors are connected to the subject, e.g. film.directed_by."}},"required":["variable","relation"],"additionalProperties":false}`,
		}, []string{"variable", "relation"}},
		{proto.Tool{Name: toolIntersection,
			Description: "Computes the intersection of two sets of entities of the same type, as a new variable.",
			Parameters:  `{"type":"object","properties":{"variable1":{"type":"string","description":"The first set of entities: a variable or an entity."},"variable2":{"type":"string","description":"The second set of entities: a variable or an entity."}},"required":["variable1","variable2"],"additionalProperties":false}`,
		}, []string{"variable1", "variable2"}},
		{proto.Tool{Name: toolGetAttributes,
			Description: "Retrieves all numerical attributes of a given variable, especially valuable when seeking entities with extreme attributes (max or min).",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The variable whose numerical attributes are to be fetched."}},"required":["variable"],"additionalProperties":false}`,
		}, []string{"variable"}},
		{proto.Tool{Name: toolArgmax,
			Description: "Finds the entity with the maximum value of the specified attribute, as a new variable; use it after identifying valid attributes with get_attributes.",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The variable among whose entities to find the maximum."},"attribute":{"type":"string","description":"The attribute to maximize, e.g. city.population."}},"required":["variable","attribute"],"additionalProperties":false}`,
		}, []string{"variable", "attribute"}},
		{proto.Tool{Name: toolArgmin,
			Description: "Finds the entity with the minimum value of the specified attribute, as a new variable; use it after identifying valid attributes with get_attributes.",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The variable among whose entities to find the minimum."},"attribute":{"type":"string","description":"The attribute to minimize, e.g. city.population."}},"required":["variable","attribute"],"additionalProperties":false}`,
		}, []string{"variable", "attribute"}},
		{proto.Tool{Name: toolCount,
			Description: "Counts the entities of a given variable; the number becomes a new variable.",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The variable whose entities to count."}},"required":["variable"],"additionalProperties":false}`,
		}, []string{"variable"}},
		{proto.Tool{Name: toolAnswer,
			Description: "Submits a variable as the final answer to the question and ends the episode.",
			Parameters:  `{"type":"object","properties":{"variable":{"type":"string","description":"The variable (#0, #1, ...) that holds the answer."}},"required":["variable"],"additionalProperties":false}`,
		}, []string{"variable"}},
	}
}

// gamesKept is how many generated instances a family keeps for the later sessions of their groups.
const gamesKept = 128

// Family generates kg instances. Its schema is read-only after New and its recent instances are kept
// under a lock, so one value serves any number of goroutines.
type Family struct {
	schema *schema
	// recent keeps freshly generated games, never played: a session of an instance generated lately
	// plays a game that shares its graph, question and answer (see game.fresh).
	recent *task.Recent[task.InstanceKey, *game]
}

// New returns the kg family.
func New() *Family {
	return &Family{schema: newSchema(), recent: task.NewRecent[task.InstanceKey, *game](gamesKept)}
}

// Caches reports the recent instances kept (task.Caching).
func (f *Family) Caches() map[string]task.CacheStats {
	return map[string]task.CacheStats{"instances": f.recent.Stats()}
}

// Name is "kg".
func (*Family) Name() string { return Name }

// MaxTurns is 15, AgentBench's limit for the knowledge graph.
func (*Family) MaxTurns() int { return MaxTurns }

// Tools are AgentBench's seven KG tools and answer, in a fresh slice so callers cannot change another's.
func (f *Family) Tools() []proto.Tool {
	out := make([]proto.Tool, len(f.schema.tools))
	for i, s := range f.schema.tools {
		out[i] = s.tool
	}
	return out
}

// New generates the instance of (split, seed). Held-out instances are those whose question hashes to 0
// modulo 5; no question, hence no instance, occurs in both splits.
func (f *Family) New(split string, seed uint64) (task.Instance, error) {
	if err := task.ValidSplit(split); err != nil {
		return nil, err
	}
	gm, err := f.recent.Load(task.InstanceKey{Split: split, Seed: seed}, func() (*game, error) { return generate(f.schema, split, seed) })
	if err != nil {
		return nil, err
	}
	return gm.fresh(), nil
}
