package app

import (
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/store"
)

// WrapStore makes New wrap the store chain it opens with wrap, under the
// hub.
func WrapStore(cfg *Config, wrap func(store.Store) store.Store) { cfg.wrapStore = wrap }

// Released is closed once everything New opened is closed, also what a
// Close that timed out left running.
func Released(a *App) <-chan struct{} { return a.released }

// Waiting is how many Peeks of a wait.
func Waiting(a *App) int { return a.waiting() }

// SetAuditOptions replaces the audit log's defaults.
func SetAuditOptions(cfg *Config, o audit.Options) { cfg.auditOptions = o }

// SetWaitRecheck replaces the re-check of a waiting Peek on a shared store.
func SetWaitRecheck(cfg *Config, d time.Duration) { cfg.waitRecheck = d }
