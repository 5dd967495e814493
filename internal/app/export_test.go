package app

import "github.com/energydatahub/messagehub/internal/repository"

// WrapStore makes New wrap the store it opens with wrap, under the
// repository and every decorator.
func WrapStore(cfg *Config, wrap func(repository.Store) repository.Store) { cfg.wrapStore = wrap }

// Released is closed once everything New opened is closed, also what a
// Close that timed out left running.
func Released(a *App) <-chan struct{} { return a.released }
