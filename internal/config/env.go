package config

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
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
			out[envName(p)] = p
			ft := f.Type
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()) {
				walk(ft, p)
			}
		}
	}
	walk(reflect.TypeFor[Config](), nil)
	return out
}

// envName is the variable of the key at path.
func envName(path []string) string { return EnvPrefix + strings.ToUpper(strings.Join(path, "_")) }

// OtherEnv are the AIRLOCK_ variables that name no key, and what each is
// for. Any other AIRLOCK_ variable is an error: a misspelt key must not
// be ignored. AIRLOCK_TEST_ starts the test suites' own.
var OtherEnv = map[string]string{
	"AIRLOCK_CONFIG":     "the configuration file (or --config)",
	"AIRLOCK_URL":        "the server's address, for clients (the Python SDK)",
	"AIRLOCK_TOKEN":      "an API key, for clients (the Python SDK)",
	"AIRLOCK_API_KEY":    "an API key, for airlock mcp --url",
	"AIRLOCK_TRACE":      "print the phases of airlock run and a jail's start, with their times",
	"AIRLOCK_CPUPROFILE": "write a CPU profile of airlock serve to this file",
	// The development scripts' own.
	"AIRLOCK_TEST_TOOLS":   "scripts/test.sh: where the test tools (runsc) are kept",
	"AIRLOCK_DEPLOY_CACHE": "deploy/image/build.sh: the image build's cache",
}

const testEnvPrefix = "AIRLOCK_TEST_"

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
		v, _ = field(v, name)
	}
	return v
}

// ApplyEnv sets the keys that env (KEY=VALUE lines, as os.Environ)
// overrides (see setValue). An AIRLOCK_ variable that names no key and is
// none of OtherEnv is an error.
func (c *Config) ApplyEnv(env []string) error {
	keys := envKeys()
	var p problems
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		path, known := keys[name]
		if !known {
			if _, other := OtherEnv[name]; !other && !strings.HasPrefix(name, testEnvPrefix) {
				p.addText(name, "names no configuration key (airlock config env lists them)")
			}
			continue
		}
		p.add(name, setValue(fieldAt(c, path), val, strings.Join(path, ".")))
	}
	return p.err()
}

// setValue sets f, the value of key, from text (an AIRLOCK_ variable's
// value or a flag's): JSON when it reads as the key's type (numbers,
// booleans, objects, lists, quoted strings), else the text as a string
// ("512M", "10s", a path); a list of strings may also be comma-separated.
// The whole value is replaced.
func setValue(f reflect.Value, text, key string) error {
	try := func(data []byte) error {
		fresh := reflect.New(f.Type())
		if err := decodeKeys(data, fresh.Elem(), key); err != nil {
			return err
		}
		f.Set(fresh.Elem())
		return nil
	}
	errJSON := try([]byte(text))
	if errJSON == nil {
		return nil
	}
	quoted, _ := json.Marshal(text)
	errText := try(quoted)
	if errText == nil {
		return nil
	}
	if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String {
		var list []string
		for _, s := range strings.Split(text, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		f.Set(reflect.ValueOf(list).Convert(f.Type()))
		return nil
	}
	// What went wrong with the reading the value was meant for.
	if json.Valid([]byte(text)) {
		return errJSON
	}
	return errText
}

// secrets are the keys that hold secrets: each has a <key>_file variant
// naming a file to read it from (a mounted Kubernetes Secret), and is
// masked by Masked.
var secrets = []struct {
	name string
	get  func(*Config) (*string, *string)
}{
	{"server.token", func(c *Config) (*string, *string) { return &c.Server.Token, &c.Server.TokenFile }},
	{"store.dsn", func(c *Config) (*string, *string) { return &c.Store.DSN, &c.Store.DSNFile }},
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
			return &Error{Problems: []string{fmt.Sprintf("set %s or %s_file, not both", s.name, s.name)}}
		}
		b, err := os.ReadFile(*file)
		if err != nil {
			return &Error{Problems: []string{fmt.Sprintf("%s_file: %v", s.name, err)}}
		}
		*val = strings.TrimSpace(string(b))
		if *val == "" {
			return &Error{Problems: []string{fmt.Sprintf("%s_file %s is empty", s.name, *file)}}
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
