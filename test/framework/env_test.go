package framework

import (
	"slices"
	"testing"
)

func TestEnvLists(t *testing.T) {
	const name = "KSHARD_TEST_ENV_LIST"
	tests := []struct {
		name      string
		value     string // "" leaves the variable unset
		def       string
		wantList  []string
		wantInts  []int
		intsPanic bool
	}{
		{name: "unset: the default", def: "1,2,4", wantList: []string{"1", "2", "4"}, wantInts: []int{1, 2, 4}},
		{name: "set: spaces trimmed", value: " 3 , 5", def: "1", wantList: []string{"3", "5"}, wantInts: []int{3, 5}},
		{name: "names", value: "upstream, kshard-2", def: "x", wantList: []string{"upstream", "kshard-2"}, intsPanic: true},
		{name: "zero is not positive", value: "0,1", def: "1", wantList: []string{"0", "1"}, intsPanic: true},
		{name: "empty item", value: "1,,2", def: "1", wantList: []string{"1", "", "2"}, intsPanic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(name, tt.value)
			if got := EnvList(name, tt.def); !slices.Equal(got, tt.wantList) {
				t.Errorf("EnvList = %q, want %q", got, tt.wantList)
			}
			defer func() {
				if r := recover(); (r != nil) != tt.intsPanic {
					t.Errorf("EnvInts panicked: %v, want a panic: %v", r, tt.intsPanic)
				}
			}()
			if got := EnvInts(name, tt.def); !slices.Equal(got, tt.wantInts) {
				t.Errorf("EnvInts = %v, want %v", got, tt.wantInts)
			}
		})
	}
}

func TestEnvFloat(t *testing.T) {
	const name = "KSHARD_TEST_ENV_FLOAT"
	tests := []struct {
		name  string
		value string // "" leaves the variable unset
		want  float64
		panic bool
	}{
		{name: "unset: the default", want: 2.5},
		{name: "a fraction", value: "0.25", want: 0.25},
		{name: "an integer", value: "3", want: 3},
		{name: "zero is not positive", value: "0", panic: true},
		{name: "negative", value: "-1", panic: true},
		{name: "not a number", value: "NaN", panic: true},
		{name: "infinite", value: "+Inf", panic: true},
		{name: "garbage", value: "fast", panic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(name, tt.value)
			defer func() {
				if r := recover(); (r != nil) != tt.panic {
					t.Errorf("EnvFloat panicked: %v, want a panic: %v", r, tt.panic)
				}
			}()
			if got := EnvFloat(name, 2.5); got != tt.want {
				t.Errorf("EnvFloat = %v, want %v", got, tt.want)
			}
		})
	}
}
