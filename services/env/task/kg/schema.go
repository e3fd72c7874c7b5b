package kg

// schema is everything instances share: relations, attributes, tools and name pools. It is built once
// per Family and never changed, so concurrent instances may read it freely.
type schema struct {
	rels      map[string]relation
	relsFrom  map[string][]relation // per subject type, in listing order
	attrs     map[string]attribute
	attrsOf   map[string][]attribute // per type, in listing order
	tools     []toolSpec
	toolIndex map[string]int
	pools     pools
}

func newSchema() *schema {
	s := &schema{
		rels:      map[string]relation{},
		relsFrom:  map[string][]relation{},
		attrs:     map[string]attribute{},
		attrsOf:   map[string][]attribute{},
		tools:     toolSpecs(),
		toolIndex: map[string]int{},
		pools:     namePools(),
	}
	for _, r := range relations() {
		s.rels[r.name] = r
		s.relsFrom[r.from] = append(s.relsFrom[r.from], r)
	}
	for _, a := range attributes() {
		s.attrs[a.name] = a
		s.attrsOf[a.typ] = append(s.attrsOf[a.typ], a)
	}
	for i, t := range s.tools {
		s.toolIndex[t.tool.Name] = i
	}
	return s
}

// toolNames lists the tools for error messages.
func (s *schema) toolNames() []string {
	out := make([]string, len(s.tools))
	for i, t := range s.tools {
		out[i] = t.tool.Name
	}
	return out
}
