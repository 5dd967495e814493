package console_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/energydatahub/messagehub/client"
	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/console"
)

// browserDeadline bounds the whole browser test: starting Chromium, every
// page and every wait. Each step waits on a condition of the page, never a
// fixed time, so this is a bound for a stuck browser, not a speed
// requirement.
const browserDeadline = 5 * time.Minute

// screenshotsEnv names a directory (relative to the module's root) where
// TestConsoleInBrowser saves a screenshot of each page, for docs/console.
const screenshotsEnv = "CONSOLE_SCREENSHOTS"

// chromiumPath is the browser the test drives: $CHROMIUM, else Debian's
// chromium package.
func chromiumPath(t *testing.T) string {
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("the console's browser test needs Chromium at %s (apt-get install chromium, or set CHROMIUM; see CONTRIBUTING.md): %v", path, err)
	}
	return path
}

// hub is a MessageHub serving in process on loopback over an embedded store,
// with --auth none, and clients of its gRPC API.
type hub struct {
	app    *app.App
	client *client.Client
	admin  adminv1.AdminClient
}

// startHub starts a hub with args added to its configuration (--auth none
// without them).
func startHub(t *testing.T, args ...string) *hub {
	t.Helper()
	cfg, err := app.ParseConfig(append([]string{
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--min-free-disk", "0",
	}, args...), nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	c, err := client.New(a.GRPCAddr(), client.Options{Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &hub{app: a, client: c, admin: adminv1.NewAdminClient(conn)}
}

// listed waits until the hub's backlog figures, recounted in the
// background, list the recipients.
func (h *hub) listed(ctx context.Context, t *testing.T, recipients ...string) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("the backlog figures list %v", recipients), func() (bool, error) {
		resp, err := h.admin.ListRecipients(ctx, &adminv1.ListRecipientsRequest{})
		return !slices.ContainsFunc(recipients, func(r string) bool {
			return !slices.ContainsFunc(resp.GetRecipients(), func(b *adminv1.RecipientBacklog) bool { return b.GetRecipient() == r })
		}), err
	})
}

// audited waits until the audit log, written in batches, holds an event
// of the action about the recipient.
func (h *hub) audited(ctx context.Context, t *testing.T, recipient string, action adminv1.AuditAction) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("the audit log holds a %s of %s", action, recipient), func() (bool, error) {
		resp, err := h.admin.ListAuditEvents(ctx, &adminv1.ListAuditEventsRequest{Recipient: recipient})
		return slices.ContainsFunc(resp.GetEvents(), func(e *adminv1.AuditEvent) bool { return e.GetAction() == action }), err
	})
}

// eventually asks check until it is true, failing the test on an error or
// when ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, check func() (bool, error)) {
	t.Helper()
	for {
		done, err := check()
		if err != nil {
			t.Fatalf("waiting until %s: %v", what, err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting until %s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// browser is one tab of a headless Chromium, with what its console
// reported: uncaught exceptions and blocked loads fail the test.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

func startBrowser(ctx context.Context, t *testing.T) *browser {
	t.Helper()
	// The flags keep Chromium from reaching out (updates, sync, QUIC
	// probes), which on a closed network makes it hang.
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
	tab, cancelTab := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{t: t, ctx: tab}
	messages := chromedp.Console(tab)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				b.problems = append(b.problems, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m.Text))
			}
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions and fails the test on an error or on a problem the page
// reported so far.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		b.t.Fatalf("%s: the page reported: %s", what, strings.Join(b.problems, "; "))
	}
}

// waitText waits until the element of the CSS selector contains want,
// reporting what it held when the wait failed.
func (b *browser) waitText(selector, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '').includes(%q)`, selector, want)
	wait, cancel := context.WithTimeout(b.ctx, browserDeadline/2)
	defer cancel()
	if _, err := chromedp.Run(wait, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(0))); err != nil {
		page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href + '\n' + document.body.innerText`))
		b.t.Fatalf("waiting for %q in %s: %v; the page:\n%s", want, selector, err, page)
	}
	b.do("after waiting for " + selector)
}

// choose picks the option of value in the select of the CSS selector, as
// a user does (the page hears the change).
func (b *browser) choose(selector, value string) {
	b.t.Helper()
	b.do("choose "+value, chromedp.SetValue(chromedp.CSS(selector), value),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).dispatchEvent(new Event('change'))`, selector)))
}

// texts runs script, a promise of an object of strings, in the page and
// returns the object.
func (b *browser) texts(script string) map[string]string {
	b.t.Helper()
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[map[string]string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("run in the page: %v", err)
	}
	return got
}

// wantTexts runs script (as texts does) and fails the test unless it
// returns want.
func (b *browser) wantTexts(what, script string, want map[string]string) {
	b.t.Helper()
	if got := b.texts(script); !maps.Equal(got, want) {
		b.t.Errorf("%s %q, want %q", what, got, want)
	}
}

// text is the text of the element of the CSS selector, once it is there.
func (b *browser) text(selector string) string {
	b.t.Helper()
	b.do("wait for "+selector, chromedp.WaitVisible(chromedp.CSS(selector)))
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(selector)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", selector, err)
	}
	return s
}

// screenshot saves the page as name.png when $CONSOLE_SCREENSHOTS is set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(moduleRoot(b.t), dir)
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func notification(recipient string, origin messagehubv1.Domain, contentType string) *client.Notification {
	return &client.Notification{
		Id: uuid.NewString(), Recipient: recipient, Origin: origin, ContentType: contentType,
		DocumentType: contentType + "Document", SupportsBundling: true, Weight: 1,
	}
}

// The console in a real browser: it loads, shows a seeded backlog, traces
// a notification, and releases a pending bundle after confirming, which the
// API then confirms; nothing it shows changes what the actor sees.
func TestConsoleInBrowser(t *testing.T) {
	h := startHub(t)
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	defer cancel()

	// An actor with three time series notifications, peeked into a pending
	// bundle, and one aggregation waiting; another actor with charges.
	actor, other := uuid.NewString(), uuid.NewString()
	series := []*client.Notification{
		notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
		notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
		notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
	}
	aggregation := notification(actor, messagehubv1.Domain_DOMAIN_AGGREGATIONS, "Aggregation")
	if _, err := h.client.Save(ctx, append(series, aggregation)...); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Save(ctx, notification(other, messagehubv1.Domain_DOMAIN_CHARGES, "ChargePrices"),
		notification(other, messagehubv1.Domain_DOMAIN_CHARGES, "ChargePrices")); err != nil {
		t.Fatal(err)
	}
	pending, err := h.client.Peek(ctx, actor, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, "")
	if err != nil || pending == nil {
		t.Fatalf("peek: %v, %v", pending, err)
	}
	bundleID := pending.GetId()

	b := startBrowser(ctx, t)
	page := "http://" + h.app.HTTPAddr() + "/console"

	// The overview: the actors with a backlog and the history plot.
	resp, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(page))
	if err != nil {
		t.Fatalf("load the console: %v", err)
	}
	if resp.Status != http.StatusOK || resp.Headers["Content-Security-Policy"] != console.ContentSecurityPolicy {
		t.Fatalf("the console's page: %d, policy %q", resp.Status, resp.Headers["Content-Security-Policy"])
	}
	b.do("load the console", chromedp.WaitVisible(chromedp.CSS("header")))
	// The figures are recounted in the background: reload once they hold
	// the seeded backlog.
	h.listed(ctx, t, actor, other)
	b.do("reload once the figures list them", chromedp.Reload())
	b.waitText("#recipients-table", actor)
	b.waitText("#recipients-table", other)
	b.choose("#recipients-order", "RECIPIENT_ORDER_SIZE")
	b.waitText("#recipients-table tbody tr:first-child", actor) // it has more waiting
	// The history holds a sample per recount at most every 5 minutes: the
	// plot, or the word that there is nothing to draw yet.
	b.do("the history plot", chromedp.WaitVisible(chromedp.CSS("#history-plot, #history-empty")))
	b.screenshot("overview")

	// The actor's page, opened from the header: cabinets, the pending
	// bundle and what the next Peek would return.
	b.do("open the actor", chromedp.SendKeys(chromedp.CSS("#open-actor-recipient"), actor),
		chromedp.Click(chromedp.CSS("#open-actor button")))
	b.waitText("#cabinets", "time series")
	b.waitText("#cabinets", "aggregations")
	b.waitText("#pending-bundles", bundleID)
	b.waitText("#preview-result", "Bundle "+bundleID+" is pending")
	rows, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#cabinets tbody tr')].map((r) => r.innerText)`))
	if err != nil || !slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, "TimeSeries\t3\t3") }) {
		t.Errorf("the cabinets' rows: %q (%v), want the time series one with 3 waiting, 3 of them pending", rows, err)
	}
	b.choose("#preview-group", "PEEK_GROUP_AGGREGATIONS")
	b.waitText("#preview-result", "the next Peek would cut this one now")
	b.waitText("#preview-result", aggregation.GetId())
	// The actor's peek is in the audit log once its batch is written.
	h.audited(ctx, t, actor, adminv1.AuditAction_AUDIT_ACTION_PEEK)
	b.do("show the audit log", chromedp.Click(chromedp.CSS("#audit-form button")))
	b.waitText("#audit-table", bundleID)
	b.waitText("#audit-table", "peek")
	b.screenshot("actor")

	// The trace of a notification in the pending bundle.
	b.do("trace", chromedp.SendKeys(chromedp.CSS("#trace-id"), series[1].GetId()),
		chromedp.Click(chromedp.CSS("#trace-form button")))
	b.waitText("#trace-state", "Pending: in a bundle the actor peeked and has not dequeued.")
	if got := b.text("#trace-bundle"); got != bundleID {
		t.Errorf("the trace names bundle %q, want %q", got, bundleID)
	}
	b.screenshot("trace")

	// Looking changed nothing the actor sees: its Peek returns its pending
	// bundle as before.
	again, err := h.client.Peek(ctx, actor, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, "")
	if err != nil || again.GetId() != bundleID {
		t.Fatalf("after the console, the actor's Peek returned %v, %v; want its pending bundle %s", again.GetId(), err, bundleID)
	}

	// The release: the dialog says what happens and needs a reason.
	b.do("back to the actor", chromedp.NavigateBack())
	b.waitText("#pending-bundles", bundleID)
	b.do("ask to release", chromedp.Click(chromedp.CSS("#pending-bundles button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
	b.waitText("#confirm-what", bundleID)
	if disabled, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('#confirm-ok').disabled`)); err != nil || !disabled {
		t.Fatalf("the release can be confirmed without a reason (disabled %v, %v)", disabled, err)
	}
	const releaseReason = "actor reports a corrupt document; support case 4711"
	b.do("give a reason", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), releaseReason), chromedp.WaitEnabled(chromedp.CSS("#confirm-ok")))
	b.screenshot("release")
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))

	b.waitText("#notice", "Released bundle "+bundleID+".")
	b.waitText("#pending-bundles", "No bundle is pending.")
	backlog, err := h.admin.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: actor})
	if err != nil || len(backlog.GetPendingBundles()) != 0 {
		t.Fatalf("after the release, pending bundles %v, %v", backlog.GetPendingBundles(), err)
	}
	afresh, err := h.client.Peek(ctx, actor, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, "")
	if err != nil || afresh.GetId() == bundleID || len(afresh.GetNotificationIds()) != len(series) {
		t.Fatalf("after the release, Peek returned %v, %v; want a new bundle of the %d notifications", afresh, err, len(series))
	}

	// The other remedy, from the trace of the waiting aggregation: the
	// dialog names the notification and needs a reason.
	b.do("trace the aggregation", chromedp.Navigate(page+"#/actor/"+actor+"/notification/"+aggregation.GetId()))
	b.waitText("#trace-state", "Waiting: saved, in no bundle yet.")
	b.do("ask to acknowledge", chromedp.Click(chromedp.CSS("#trace-section button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
	if upTo, err := chromedp.Run(b.ctx, chromedp.Value(chromedp.CSS("#confirm-up-to"))); err != nil || upTo != aggregation.GetId() {
		t.Fatalf("the dialog acknowledges up to %q (%v), want %s", upTo, err, aggregation.GetId())
	}
	// A refusal stays in the dialog, which can then be corrected.
	const acknowledgeReason = "the actor confirmed receipt by mail"
	b.do("acknowledge up to an unknown notification", chromedp.SetValue(chromedp.CSS("#confirm-up-to"), uuid.NewString()),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), acknowledgeReason),
		chromedp.WaitEnabled(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.waitText("#confirm-error", "AcknowledgeOnBehalf failed (")
	t.Logf("the dialog says: %s", b.text("#confirm-error"))
	b.do("acknowledge up to the aggregation", chromedp.WaitVisible(chromedp.CSS("#confirm[open]")),
		chromedp.SetValue(chromedp.CSS("#confirm-up-to"), aggregation.GetId()),
		chromedp.WaitEnabled(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.waitText("#notice", "Acknowledged 1 notification in 1 bundle on the actor's behalf")
	b.waitText("#trace-state", "Dequeued: the actor has acknowledged it.")
	trace, err := h.admin.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: actor, NotificationId: aggregation.GetId()})
	if err != nil || trace.GetState() != adminv1.NotificationState_NOTIFICATION_STATE_DEQUEUED {
		t.Fatalf("after acknowledging, the aggregation is %v, %v", trace.GetState(), err)
	}

	// An actor's backlog of more bundles than one call of the hub dequeues
	// (notifications that do not support bundling: a bundle each): the
	// console calls until none remain and says so once.
	large := uuid.NewString()
	largeBacklog := make([]*client.Notification, 150)
	for i := range largeBacklog {
		largeBacklog[i] = notification(large, messagehubv1.Domain_DOMAIN_CHARGES, "ChargePrices")
		largeBacklog[i].SupportsBundling = false
	}
	if _, err := h.client.Save(ctx, largeBacklog...); err != nil {
		t.Fatal(err)
	}
	last := largeBacklog[len(largeBacklog)-1].GetId()
	b.do("trace the last of a large backlog", chromedp.Navigate(page+"#/actor/"+large+"/notification/"+last))
	b.waitText("#trace-state", "Waiting: saved, in no bundle yet.")
	b.do("acknowledge the large backlog", chromedp.Click(chromedp.CSS("#trace-section button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "the actor has left the market"),
		chromedp.WaitEnabled(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.waitText("#notice", "Acknowledged 150 notifications in 150 bundles on the actor's behalf; the audit log names each bundle.")
	if left, err := h.client.Peek(ctx, large, messagehubv1.PeekGroup_PEEK_GROUP_ALL, ""); err != nil || left != nil {
		t.Fatalf("after acknowledging the large backlog, Peek returned %v, %v; want nothing", left, err)
	}

	// The audit log on the actor's page names both remedies and their
	// reasons.
	b.do("back to the actor", chromedp.Navigate(page+"#/actor/"+actor))
	b.waitText("#audit-table", "release bundle")
	b.waitText("#audit-table", releaseReason)
	b.waitText("#audit-table", "acknowledge on behalf")
	b.waitText("#audit-table", acknowledgeReason)
}

// With --auth jwt, the console's calls carry the token the operator gives
// (kept for the tab, across a reload): without one the hub refuses them,
// an actor's token is not enough, an admin's is.
func TestConsoleSendsTheAdminToken(t *testing.T) {
	is := authtest.NewIssuer(t, "https://login.console.example/", "messagehub-console")
	h := startHub(t, "--auth", "jwt", "--jwks-file", is.WriteJWKS(t),
		"--jwt-issuer", is.Issuer, "--jwt-audience", is.Audience)
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	defer cancel()
	b := startBrowser(ctx, t)
	actor := uuid.NewString()
	page := "http://" + h.app.HTTPAddr() + "/console/#/actor/" + actor
	useToken := func(token string) {
		t.Helper()
		b.do("enter a token", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#token-form button")))
	}

	b.do("load the actor's page", chromedp.Navigate(page))
	b.waitText("#backlog", "GetBacklog: the hub refused the token (401")
	useToken(is.RS256(t, is.Claims(actor, "actor")))
	b.waitText("#backlog", "GetBacklog: the token may not call this (403")
	useToken(is.RS256(t, is.Claims(uuid.NewString(), "admin")))
	b.waitText("#backlog", "Nothing waiting: the actor has no backlog.")
	b.waitText("#token-state", "token set for this tab")

	b.do("reload", chromedp.Reload())
	b.waitText("#backlog", "Nothing waiting: the actor has no backlog.")
	b.do("forget the token", chromedp.Click(chromedp.CSS("#forget-token")))
	b.waitText("#backlog", "GetBacklog: the hub refused the token (401")
}

// The history plot draws a line and its points per domain in each of its
// two charts, from the answer's shape (64-bit integers as strings), and
// says so when there is nothing to draw.
func TestThePlotDrawsEachDomain(t *testing.T) {
	b := emptyConsole(t)
	const draw = `(async () => {
		const { historyPlot } = await import('/console/plot.js');
		const now = Date.now();
		const sample = (minutesAgo, waiting) => ({ atMs: String(now - minutesAgo * 60000), domains: [
			{ domain: 'DOMAIN_TIME_SERIES', waiting: String(waiting), oldestAgeSeconds: String(60 * minutesAgo) },
			{ domain: 'DOMAIN_CHARGES', waiting: '7', oldestAgeSeconds: '0' },
		] });
		const plot = historyPlot([sample(170, 10), sample(90, 2500), sample(1, 40)], 180, now);
		const empty = historyPlot([], 180, now);
		return {
			charts: plot.querySelectorAll('svg.plot').length,
			lines: plot.querySelectorAll('svg.plot polyline').length,
			points: plot.querySelectorAll('svg.plot circle').length,
			legend: plot.querySelector('.legend').textContent,
			top: [...plot.querySelectorAll('svg.plot')[0].querySelectorAll('text')].map((t) => t.textContent),
			ages: plot.querySelectorAll('svg.plot')[1].getAttribute('aria-label'),
			empty: empty.textContent,
		};
	})()`
	type drawn struct {
		Charts, Lines, Points int
		Legend, Empty, Ages   string
		Top                   []string
	}
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[drawn](draw, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if got.Charts != 2 || got.Lines != 4 || got.Points != 12 {
		t.Errorf("drew %d charts, %d lines, %d points; want 2 charts of a line of 3 points per domain", got.Charts, got.Lines, got.Points)
	}
	if !strings.Contains(got.Legend, "time series") || !strings.Contains(got.Legend, "charges") {
		t.Errorf("legend %q", got.Legend)
	}
	if got.Ages != "Age of the oldest waiting notification (hours), per domain" {
		t.Errorf("the ages chart: %q, want them in hours (the oldest is nearly 3 h old)", got.Ages)
	}
	if !slices.Contains(got.Top, "5,000") {
		t.Errorf("the waiting chart's labels %q: want its top rounded up to 5,000", got.Top)
	}
	if got.Empty != "No backlog recorded in the last 180 minutes." {
		t.Errorf("without samples: %q", got.Empty)
	}
	b.do("after drawing")
}

// A call the hub refuses, does not implement or does not answer shows
// what to do about it, in place of its figures.
func TestARefusedCallSaysWhy(t *testing.T) {
	b := emptyConsole(t)
	const describe = `(async () => {
		const { APIError } = await import('/console/api.js');
		return Object.fromEntries([0, 401, 403, 404, 501].map((status) =>
			[status, new APIError('ListAuditEvents', status, 'what the hub said').describe()]));
	})()`
	b.wantTexts("messages", describe, map[string]string{
		"0":   "ListAuditEvents: the hub did not answer (what the hub said).",
		"401": "ListAuditEvents: the hub refused the token (401: what the hub said). Enter an admin token above.",
		"403": "ListAuditEvents: the token may not call this (403: what the hub said); it needs the admin role.",
		"404": "ListAuditEvents failed (404): what the hub said",
		"501": "ListAuditEvents is not available on this hub: it is not implemented (501).",
	})
}

// emptyConsole is a browser showing the console of a hub with nothing
// stored.
func emptyConsole(t *testing.T) *browser {
	t.Helper()
	h := startHub(t)
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	t.Cleanup(cancel)
	b := startBrowser(ctx, t)
	b.do("load the console", chromedp.Navigate("http://"+h.app.HTTPAddr()+"/console/"), chromedp.WaitVisible(chromedp.CSS("header")))
	return b
}
