package config

// MinSecretLength is the shortest shared secret any section accepts where
// it is the only thing standing between a caller and the daemon (a bus
// token or password off loopback, a webhook or signing secret, an API
// key): a shorter one can be guessed. Generated secrets are far longer
// (openssl rand -hex 32 gives 64 characters).
const MinSecretLength = 16
