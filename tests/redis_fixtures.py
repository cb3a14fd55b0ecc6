"""Redis test servers: placeholder until the Redis backend lands."""
