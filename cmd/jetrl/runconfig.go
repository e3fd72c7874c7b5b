package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/goccy/go-yaml"
)

// runConfig is a YAML file of settings for `jetrl up`: its keys are the flag names (snake_case or
// kebab-case), and a flag given on the command line overrides the file.
type runConfig struct {
	values map[string]any
}

// loadRunConfig is kong's configuration loader for --config.
func loadRunConfig(r io.Reader) (kong.Resolver, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	values := map[string]any{}
	if err := yaml.UnmarshalWithOptions(data, &values, yaml.UseOrderedMap()); err != nil {
		return nil, fmt.Errorf("run config: %w", err)
	}
	norm := make(map[string]any, len(values))
	for k, v := range values {
		norm[strings.ReplaceAll(k, "_", "-")] = v
	}
	return &runConfig{values: norm}, nil
}

// recordedForServices are keys a run config in KV carries for service processes only (the stored pool
// checkpoint's object name and probability, from --pool-checkpoint); a file shown by `jetrl config show`
// may hold them, and jetrl's own commands ignore them.
var recordedForServices = []string{"checkpoint", "checkpoint-prob"}

// Validate refuses keys that are not flags of any command, so a misspelt setting is an error, not ignored.
func (c *runConfig) Validate(app *kong.Application) error {
	known := map[string]bool{}
	for _, k := range recordedForServices {
		known[k] = true
	}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			known[f.Name] = true
		}
		for _, child := range n.Children {
			walk(child)
		}
	}
	walk(app.Node)
	var unknown []string
	for k := range c.values {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("run config: unknown settings %s (see jetrl up --help for the names)", strings.Join(unknown, ", "))
	}
	return nil
}

// Resolve gives a flag its value from the file, rendered as the command line would give it.
func (c *runConfig) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	v, ok := c.values[flag.Name]
	if !ok {
		return nil, nil
	}
	if s, isString := v.(string); isString && s == "" && flag.Tag != nil && pathTypes[flag.Tag.Type] {
		return nil, nil // an empty path is none (as written to config.yaml), not the current folder
	}
	return render(v, flag), nil
}

// pathTypes are kong's file and folder types; kong resolves an empty value of them to the current folder.
var pathTypes = map[string]bool{"path": true, "existingfile": true, "existingdir": true, "filecontent": true}

func render(v any, flag *kong.Flag) any {
	sep, mapSep := ",", ","
	if flag.Tag != nil {
		if flag.Tag.Sep != 0 {
			sep = string(flag.Tag.Sep)
		}
		if flag.Tag.MapSep != 0 {
			mapSep = string(flag.Tag.MapSep)
		}
	}
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, sep)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%v", k, x[k])
		}
		return strings.Join(parts, mapSep)
	case yaml.MapSlice:
		parts := make([]string, len(x))
		for i, item := range x {
			parts[i] = fmt.Sprintf("%v=%v", item.Key, item.Value)
		}
		return strings.Join(parts, mapSep)
	default:
		return fmt.Sprint(x)
	}
}

// effectiveSettings lists a command's settings by flag name (snake_case) with the values in force.
func effectiveSettings(cmd any) map[string]any {
	out := map[string]any{}
	rv := reflect.ValueOf(cmd).Elem()
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		name := rt.Field(i).Tag.Get("name")
		if name == "" || name == "config" {
			continue
		}
		v := rv.Field(i).Interface()
		if d, ok := v.(time.Duration); ok {
			v = d.String()
		}
		out[strings.ReplaceAll(name, "-", "_")] = v
	}
	return out
}

// settingsYAML renders settings as YAML, keys sorted, loadable again with --config.
func settingsYAML(settings map[string]any) ([]byte, error) {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ms := make(yaml.MapSlice, 0, len(keys))
	for _, k := range keys {
		ms = append(ms, yaml.MapItem{Key: k, Value: settings[k]})
	}
	return yaml.Marshal(ms)
}

// settingsJSON renders settings as JSON (the run record in KV).
func settingsJSON(settings map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	err := enc.Encode(settings)
	return buf.Bytes(), err
}
