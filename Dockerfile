# The capgate image: one static binary on scratch. Build it with
# scripts/image.sh, which builds the binary with the local Go
# (CGO_ENABLED=0) and lays out the build context this file copies from, so
# the build needs no network beyond the Go module proxy.
#
#   port 8080        the gateway (CAPGATE_LISTEN); the staff API, /metrics
#                    and the probes too unless CAPGATE_ADMIN_LISTEN is set
#   /var/lib/capgate the SQLite config database of a single gateway
#                    (CAPGATE_DATABASE); unused with PostgreSQL
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY passwd /etc/passwd
COPY group /etc/group
COPY --chown=10001:10001 data/ /var/lib/capgate/
COPY capgate /usr/local/bin/capgate
ENV CAPGATE_LISTEN=0.0.0.0:8080 \
    CAPGATE_DATABASE=sqlite:/var/lib/capgate/capgate.db
WORKDIR /var/lib/capgate
VOLUME /var/lib/capgate
EXPOSE 8080
USER capgate:capgate
# The binary probes itself (scratch has no curl): /livez on CAPGATE_LISTEN.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/capgate", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/capgate"]
CMD ["serve"]
