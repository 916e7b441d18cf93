//go:build !amd64

package jail

func syscallNumbersArch() map[string]uintptr { return nil }

func syscallCasesArch() []archCase { return nil }

func foreignABICases() []foreignABI { return nil }
