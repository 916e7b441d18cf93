package config

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"airlock/internal/errdefs"
)

// EnvPrefix starts the environment variables that override the
// configuration: AIRLOCK_ and the key's path in upper case, joined by _
// (server.max_sessions is AIRLOCK_SERVER_MAX_SESSIONS, a whole section
// such as quotas is AIRLOCK_QUOTAS as JSON).
const EnvPrefix = "AIRLOCK_"

// envKeys maps every variable name to its key's path in the JSON.
func envKeys() map[string][]string {
	out := map[string][]string{}
	var walk func(t reflect.Type, path []string)
	walk = func(t reflect.Type, path []string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := append(append([]string{}, path...), name)
			out[EnvPrefix+strings.ToUpper(strings.Join(p, "_"))] = p
			ft := f.Type
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()) {
				walk(ft, p)
			}
		}
	}
	walk(reflect.TypeFor[Config](), nil)
	return out
}

// EnvNames lists every variable that overrides a key, sorted.
func EnvNames() []string {
	var names []string
	for n := range envKeys() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fieldAt finds the field of c at a JSON path.
func fieldAt(c *Config, path []string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for _, name := range path {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if n == name {
				v = v.Field(i)
				break
			}
		}
	}
	return v
}

// ApplyEnv sets the keys that env (KEY=VALUE lines, as os.Environ)
// overrides. A value is JSON when it parses as the key's type (numbers,
// booleans, objects, arrays), else a string ("512M", "10s", a path); a
// list of strings may also be comma-separated. AIRLOCK_ variables that
// name no key (AIRLOCK_CONFIG, say) are not this function's.
func (c *Config) ApplyEnv(env []string) error {
	keys := envKeys()
	var errs []error
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		path, known := keys[name]
		if !ok || !known {
			continue
		}
		f := fieldAt(c, path)
		if err := setFromEnv(f, val); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %v", name, strings.Join(path, "."), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

func setFromEnv(f reflect.Value, val string) error {
	ptr := f.Addr().Interface()
	fresh := reflect.New(f.Type())
	// JSON first (numbers, booleans, objects, lists, quoted strings)...
	if err := Decode([]byte(val), fresh.Interface()); err == nil {
		f.Set(fresh.Elem())
		return nil
	}
	// ...then the text as a string.
	quoted, _ := json.Marshal(val)
	if err := Decode(quoted, fresh.Interface()); err == nil {
		f.Set(fresh.Elem())
		return nil
	}
	if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String {
		var list []string
		for _, s := range strings.Split(val, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		f.Set(reflect.ValueOf(list).Convert(f.Type()))
		return nil
	}
	if u, ok := ptr.(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(val))
	}
	return fmt.Errorf("cannot read %s as %s", truncate([]byte(val)), f.Type())
}

// secrets are the keys that hold secrets: each has a <key>_file variant
// naming a file to read it from (a mounted Kubernetes Secret), and is
// masked by Masked.
var secrets = []struct {
	name string
	get  func(*Config) (*string, *string)
}{
	{"server.token", func(c *Config) (*string, *string) { return &c.Server.Token, &c.Server.TokenFile }},
}

// loadSecretFiles reads every secret whose _file key is set. Setting both
// a secret and its file is an error.
func (c *Config) loadSecretFiles() error {
	for _, s := range secrets {
		val, file := s.get(c)
		if *file == "" {
			continue
		}
		if *val != "" {
			return fmt.Errorf("%w: set %s or %s_file, not both", errdefs.ErrInvalidArgument, s.name, s.name)
		}
		b, err := os.ReadFile(*file)
		if err != nil {
			return fmt.Errorf("%w: %s_file: %v", errdefs.ErrInvalidArgument, s.name, err)
		}
		*val = strings.TrimSpace(string(b))
		if *val == "" {
			return fmt.Errorf("%w: %s_file %s is empty", errdefs.ErrInvalidArgument, s.name, *file)
		}
	}
	return nil
}

// Masked returns the configuration with every secret replaced by "***"
// (for `airlock config print` and logs).
func (c Config) Masked() Config {
	for _, s := range secrets {
		if val, _ := s.get(&c); *val != "" {
			*val = "***"
		}
	}
	return c
}
