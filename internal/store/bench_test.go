package store

import (
	"context"
	"testing"
)

func BenchmarkAuthenticate(b *testing.B) {
	db, _ := OpenSQLite(b.TempDir())
	defer db.Close()
	secret, _, _ := db.CreateKey(context.Background(), "t", false, "")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		db.Authenticate(context.Background(), secret)
	}
}

func BenchmarkDataVersion(b *testing.B) {
	db, _ := OpenSQLite(b.TempDir())
	defer db.Close()
	conn, _ := db.keys.Conn(context.Background())
	defer conn.Close()
	b.ResetTimer()
	var v int64
	for i := 0; i < b.N; i++ {
		conn.QueryRowContext(context.Background(), `PRAGMA data_version`).Scan(&v)
	}
}
