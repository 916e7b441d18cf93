package server

import (
	"airlock/internal/config"
	"airlock/internal/session"
)

// LoadConfig builds the configuration from src (config.Build: defaults,
// file, environment, flags, Validate) and checks what config leaves to the
// packages that use its data: the patterns of redaction and code rules.
// Every command starts from it, so that a bad configuration is refused
// the same way whichever command reads it. Its errors are *config.Error.
func LoadConfig(src config.Sources) (config.Config, error) {
	cfg, err := config.Build(src)
	if err != nil {
		return cfg, err
	}
	return cfg, session.CheckPolicy(cfg)
}
