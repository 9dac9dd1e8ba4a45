"""Who is on the other end of a connection and what they may do: TLS, SASL and ACLs, with Kafka's names."""
