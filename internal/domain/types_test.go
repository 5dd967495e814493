package domain_test

import (
	"math"
	"slices"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Every group value worth asking about, real or not.
var allGroups = []domain.PeekGroup{
	domain.GroupUnspecified, domain.GroupAll, domain.GroupTimeSeries,
	domain.GroupAggregations, domain.GroupMasterData, -1, 5, math.MaxInt32,
}

// Origin values that are not defined domains.
var invalidOrigins = []domain.Origin{domain.OriginUnspecified, -1, domain.OriginAggregations + 1, 100, math.MaxInt32, math.MinInt32}

func TestEnumValuesMatchThePublicContract(t *testing.T) {
	tests := []struct {
		name      string
		got, want int32
	}{
		{"DOMAIN_UNSPECIFIED is 0", int32(domain.OriginUnspecified), 0},
		{"DOMAIN_TIME_SERIES is 1", int32(domain.OriginTimeSeries), 1},
		{"DOMAIN_CHARGES is 2", int32(domain.OriginCharges), 2},
		{"DOMAIN_MARKET_ROLES is 3", int32(domain.OriginMarketRoles), 3},
		{"DOMAIN_METERING_POINTS is 4", int32(domain.OriginMeteringPoints), 4},
		{"DOMAIN_AGGREGATIONS is 5", int32(domain.OriginAggregations), 5},
		{"PEEK_GROUP_UNSPECIFIED is 0", int32(domain.GroupUnspecified), 0},
		{"PEEK_GROUP_ALL is 1", int32(domain.GroupAll), 1},
		{"PEEK_GROUP_TIME_SERIES is 2", int32(domain.GroupTimeSeries), 2},
		{"PEEK_GROUP_AGGREGATIONS is 3", int32(domain.GroupAggregations), 3},
		{"PEEK_GROUP_MASTER_DATA is 4", int32(domain.GroupMasterData), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %d, want %d", tt.got, tt.want)
			}
		})
	}
}

func TestOriginsListsEveryDefinedOriginExactlyOnce(t *testing.T) {
	want := []domain.Origin{domain.OriginTimeSeries, domain.OriginCharges, domain.OriginMarketRoles, domain.OriginMeteringPoints, domain.OriginAggregations}
	got := slices.Clone(domain.Origins)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Origins = %v, want the five defined domains %v", domain.Origins, want)
	}
}

func TestOriginIsValidExactlyWhenDefinedAndNotUnspecified(t *testing.T) {
	tests := []struct {
		name   string
		origin domain.Origin
		want   bool
	}{
		{"time series is valid", domain.OriginTimeSeries, true},
		{"charges is valid", domain.OriginCharges, true},
		{"market roles is valid", domain.OriginMarketRoles, true},
		{"metering points is valid", domain.OriginMeteringPoints, true},
		{"aggregations is valid", domain.OriginAggregations, true},
		{"unspecified is not valid", domain.OriginUnspecified, false},
		{"one past the enum is not valid", domain.OriginAggregations + 1, false},
		{"a negative value is not valid", -1, false},
		{"the smallest int32 is not valid", math.MinInt32, false},
		{"the largest int32 is not valid", math.MaxInt32, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.origin.Valid(); got != tt.want {
				t.Errorf("Origin(%d).Valid() = %v, want %v", tt.origin, got, tt.want)
			}
		})
	}
}

func TestPeekGroupValidityAndAllness(t *testing.T) {
	tests := []struct {
		name      string
		group     domain.PeekGroup
		wantValid bool
		wantAll   bool
	}{
		{"unspecified is valid and means all", domain.GroupUnspecified, true, true},
		{"all is valid and is all", domain.GroupAll, true, true},
		{"time series is valid and not all", domain.GroupTimeSeries, true, false},
		{"aggregations is valid and not all", domain.GroupAggregations, true, false},
		{"master data is valid and not all", domain.GroupMasterData, true, false},
		{"one past the enum is neither", domain.GroupMasterData + 1, false, false},
		{"a negative value is neither", -1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.group.Valid(); got != tt.wantValid {
				t.Errorf("PeekGroup(%d).Valid() = %v, want %v", tt.group, got, tt.wantValid)
			}
			if got := tt.group.IsAll(); got != tt.wantAll {
				t.Errorf("PeekGroup(%d).IsAll() = %v, want %v", tt.group, got, tt.wantAll)
			}
		})
	}
}

func TestPeekGroupContainsExactlyTheDomainsOfTheDesign(t *testing.T) {
	every := []domain.Origin{domain.OriginTimeSeries, domain.OriginCharges, domain.OriginMarketRoles, domain.OriginMeteringPoints, domain.OriginAggregations}
	tests := []struct {
		name  string
		group domain.PeekGroup
		want  []domain.Origin
	}{
		{"time series holds only time series", domain.GroupTimeSeries, []domain.Origin{domain.OriginTimeSeries}},
		{"aggregations holds only aggregations", domain.GroupAggregations, []domain.Origin{domain.OriginAggregations}},
		{"master data holds market roles, metering points and charges", domain.GroupMasterData, []domain.Origin{domain.OriginCharges, domain.OriginMarketRoles, domain.OriginMeteringPoints}},
		{"all holds every domain", domain.GroupAll, every},
		{"unspecified holds every domain", domain.GroupUnspecified, every},
		{"a group above the enum holds nothing", domain.GroupMasterData + 1, nil},
		{"a negative group holds nothing", -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []domain.Origin
			for _, o := range every {
				if tt.group.Contains(o) {
					got = append(got, o)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("PeekGroup(%d) contains %v, want %v", tt.group, got, tt.want)
			}
		})
	}
}

func TestNoGroupContainsAnInvalidOrigin(t *testing.T) {
	for _, g := range allGroups {
		for _, o := range invalidOrigins {
			if g.Contains(o) {
				t.Errorf("PeekGroup(%d).Contains(Origin(%d)) = true, want false", g, o)
			}
		}
	}
}

func TestGroupOfMapsEachOriginToItsRealGroupAndNeverToAll(t *testing.T) {
	tests := []struct {
		name   string
		origin domain.Origin
		want   domain.PeekGroup
	}{
		{"time series belongs to time series", domain.OriginTimeSeries, domain.GroupTimeSeries},
		{"aggregations belongs to aggregations", domain.OriginAggregations, domain.GroupAggregations},
		{"charges belongs to master data", domain.OriginCharges, domain.GroupMasterData},
		{"market roles belongs to master data", domain.OriginMarketRoles, domain.GroupMasterData},
		{"metering points belongs to master data", domain.OriginMeteringPoints, domain.GroupMasterData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := domain.GroupOf(tt.origin)
			if got != tt.want {
				t.Errorf("GroupOf(%d) = %d, want %d", tt.origin, got, tt.want)
			}
			if got.IsAll() {
				t.Errorf("GroupOf(%d) is the ALL view, want a real group", tt.origin)
			}
			if !got.Contains(tt.origin) {
				t.Errorf("GroupOf(%d) = %d does not contain the origin", tt.origin, got)
			}
		})
	}
	for _, o := range invalidOrigins {
		if g := domain.GroupOf(o); g.IsAll() || !g.Valid() {
			t.Errorf("GroupOf(invalid origin %d) = %d, want one of the three real groups", o, g)
		}
	}
}

func TestEveryOriginBelongsToExactlyOneRealGroup(t *testing.T) {
	realGroups := []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}
	for _, o := range domain.Origins {
		var in []domain.PeekGroup
		for _, g := range realGroups {
			if g.Contains(o) {
				in = append(in, g)
			}
		}
		if len(in) != 1 || in[0] != domain.GroupOf(o) {
			t.Errorf("origin %d is in real groups %v, want exactly [GroupOf = %d]", o, in, domain.GroupOf(o))
		}
	}
}
