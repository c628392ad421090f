package auth_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/rivet-go/rivet/internal/auth"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   error
	}{
		{"none", nil, auth.ErrNoToken},
		{"right", []string{"Bearer tok"}, nil},
		{"scheme in capitals", []string{"BEARER tok"}, nil},
		{"wrong", []string{"Bearer tik"}, auth.ErrBadToken},
		{"prefix of the token", []string{"Bearer to"}, auth.ErrBadToken},
		{"empty", []string{"Bearer "}, auth.ErrBadToken},
		{"another scheme", []string{"Basic dG9rOg=="}, auth.ErrNoToken},
		{"one of several", []string{"Bearer tik", "Bearer tok"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := metadata.MD{}
			for _, v := range tc.values {
				md.Append(auth.Header, v)
			}
			if err := auth.Check(md, "tok"); !errors.Is(err, tc.want) {
				t.Fatalf("Check = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCredentialsSendWhatCheckAccepts(t *testing.T) {
	m, err := auth.NewCredentials("tok").GetRequestMetadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Check(metadata.New(m), "tok"); err != nil {
		t.Fatalf("Check of the credentials' own metadata: %v", err)
	}
}
