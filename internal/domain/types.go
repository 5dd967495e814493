package domain

import "fmt"

// Origin is the domain that produced a notification. The values match the
// Domain enum of the public API.
type Origin int32

// The origins. OriginUnspecified is never valid on a stored notification.
const (
	OriginUnspecified Origin = iota
	OriginTimeSeries
	OriginCharges
	OriginMarketRoles
	OriginMeteringPoints
	OriginAggregations
)

// Origins lists every defined origin.
var Origins = []Origin{OriginTimeSeries, OriginCharges, OriginMarketRoles, OriginMeteringPoints, OriginAggregations}

// Valid reports whether o is a defined, non-unspecified origin.
func (o Origin) Valid() bool { return o >= OriginTimeSeries && o <= OriginAggregations }

// originNames are the origins' names in the public API's Domain enum.
var originNames = map[Origin]string{
	OriginUnspecified: "DOMAIN_UNSPECIFIED", OriginTimeSeries: "DOMAIN_TIME_SERIES", OriginCharges: "DOMAIN_CHARGES",
	OriginMarketRoles: "DOMAIN_MARKET_ROLES", OriginMeteringPoints: "DOMAIN_METERING_POINTS", OriginAggregations: "DOMAIN_AGGREGATIONS",
}

// Name is o's name in the public API (DOMAIN_TIME_SERIES, ...), for
// messages an operator acts on.
func (o Origin) Name() string {
	if n, ok := originNames[o]; ok {
		return n
	}
	return fmt.Sprintf("DOMAIN_%d", int32(o))
}

// PeekGroup selects which origins a Peek may deliver. The values match the
// PeekGroup enum of the public API.
type PeekGroup int32

// The peek groups. GroupUnspecified behaves as GroupAll.
const (
	GroupUnspecified PeekGroup = iota
	GroupAll
	GroupTimeSeries
	GroupAggregations
	GroupMasterData
)

// Valid reports whether g is a defined group (unspecified counts: it means all).
func (g PeekGroup) Valid() bool { return g >= GroupUnspecified && g <= GroupMasterData }

// IsAll reports whether g is the view over every domain.
func (g PeekGroup) IsAll() bool { return g == GroupUnspecified || g == GroupAll }

// Contains reports whether a Peek for g may deliver notifications from o.
func (g PeekGroup) Contains(o Origin) bool {
	if !o.Valid() {
		return false
	}
	return g.IsAll() || GroupOf(o) == g
}

// GroupOf is the group a pending bundle of origin o belongs to. ALL is never
// returned: it is a view over the three real groups.
func GroupOf(o Origin) PeekGroup {
	switch o {
	case OriginTimeSeries:
		return GroupTimeSeries
	case OriginAggregations:
		return GroupAggregations
	default:
		return GroupMasterData
	}
}

// Notification is one DataAvailable event: data of one domain is ready for
// one recipient. IDs are canonical lower-case UUID strings.
type Notification struct {
	ID               string
	Recipient        string
	Origin           Origin
	ContentType      string
	DocumentType     string
	SupportsBundling bool
	Weight           int64
}

// Bundle is an ordered run of one cabinet's notifications delivered together.
type Bundle struct {
	ID              string
	Recipient       string
	Origin          Origin
	ContentType     string
	DocumentTypes   []string // distinct, in order of first appearance
	NotificationIDs []string
	Weight          int64
}

// SaveResult counts what a Save did.
type SaveResult struct {
	Saved      int
	Duplicates int
}
