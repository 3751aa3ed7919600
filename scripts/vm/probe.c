/*
 * scripts/vm/probe.c — a stand-in for the project's test binary, used by
 * selftest.sh to check the VM stage end to end (build: see selftest.sh).
 *
 * It follows the contract stage.sh offers a test binary:
 *   RPCRDMA_DEVICE, RPCRDMA_PEER_DEVICE  local / peer RDMA device names
 *   RPCRDMA_SERVER_ADDR, RPCRDMA_CLIENT_ADDR  IPv4 addresses of the two sides
 *   RPCRDMA_PEER_NETNS   (siw, one process) netns file of the server side:
 *                        the server thread setns()es into it before it creates
 *                        its rdma_cm id (ids live in their creator's netns)
 *   RPCRDMA_ROLE         server | client (two processes); unset = both sides here
 *   RPCRDMA_READY_FILE   (server) created once the listener is up
 * One RC connection through rdma_cm, a SEND each way (ping-pong), every
 * completion waited for at most 20 s, then disconnect.
 * Exit status 0 on success.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define PORT "20079"
#define MSG 64

static const char *env(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* Wait up to WAIT_S seconds for one completion on cq (busy poll with short
 * sleeps: a lost event must not hang the probe). */
#define WAIT_S 20
static int wait_comp(struct ibv_cq *cq, const char *who, const char *what)
{
	struct ibv_wc wc;
	for (int i = 0; i < WAIT_S * 1000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			break;
		if (n == 1) {
			if (wc.status == IBV_WC_SUCCESS)
				return 0;
			fprintf(stderr, "%s: %s completion: %s\n", who, what, ibv_wc_status_str(wc.status));
			return 1;
		}
		usleep(1000);
	}
	fprintf(stderr, "%s: no %s completion within %d s\n", who, what, WAIT_S);
	return 1;
}

/* Ping-pong: the client sends first, the server answers after receiving.
 * expect: device name the connection must be on (NULL = any). */
static int exchange(struct rdma_cm_id *id, const char *who, const char *expect, int server)
{
	char rx[MSG] = {0}, tx[MSG];
	struct ibv_mr *rmr, *smr;
	const char *dev = ibv_get_device_name(id->verbs->device);
	/* a lost packet is retransmitted after ~67 ms (4.096 us * 2^14), not never */
	uint8_t ack_timeout = 14;
	int rc = 1;

	printf("%s: connection on device %s\n", who, dev);
	if (expect && strcmp(dev, expect) != 0) {
		fprintf(stderr, "%s: expected device %s, got %s\n", who, expect, dev);
		return 1;
	}
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout, sizeof ack_timeout))
		perror("rdma_set_option(ACK_TIMEOUT)"); /* not fatal */
	snprintf(tx, sizeof tx, "hello from the %s on %s", who, dev);
	rmr = rdma_reg_msgs(id, rx, sizeof rx);
	smr = rdma_reg_msgs(id, tx, sizeof tx);
	if (!rmr || !smr) {
		perror("rdma_reg_msgs");
		return 1;
	}
	if (rdma_post_recv(id, NULL, rx, sizeof rx, rmr)) {
		perror("rdma_post_recv");
		goto out;
	}
	if (server ? rdma_accept(id, NULL) : rdma_connect(id, NULL)) {
		perror(server ? "rdma_accept" : "rdma_connect");
		goto out;
	}
	if (server && wait_comp(id->recv_cq, who, "receive"))
		goto out;
	if (rdma_post_send(id, NULL, tx, sizeof tx, smr, IBV_SEND_SIGNALED)) {
		perror("rdma_post_send");
		goto out;
	}
	if (wait_comp(id->send_cq, who, "send"))
		goto out;
	if (!server && wait_comp(id->recv_cq, who, "receive"))
		goto out;
	printf("%s: received \"%s\"\n", who, rx);
	rc = 0;
	/* linger: let a retransmitted last message still find this QP to ACK it */
	if (!server)
		usleep(500000);
out:
	rdma_disconnect(id);
	rdma_dereg_mr(rmr);
	rdma_dereg_mr(smr);
	return rc;
}

static struct rdma_cm_id *endpoint(const char *addr, int passive, const char *bind_addr)
{
	struct rdma_addrinfo hints = {0}, *res;
	struct ibv_qp_init_attr attr = {0};
	struct rdma_cm_id *id;
	struct sockaddr_in src = {0};

	hints.ai_port_space = RDMA_PS_TCP;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	else if (bind_addr) {
		src.sin_family = AF_INET;
		inet_pton(AF_INET, bind_addr, &src.sin_addr);
		hints.ai_src_addr = (struct sockaddr *)&src;
		hints.ai_src_len = sizeof src;
	}
	if (rdma_getaddrinfo(addr, PORT, &hints, &res)) {
		perror("rdma_getaddrinfo");
		return NULL;
	}
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 0;
	attr.sq_sig_all = 1;
	/* passive: rdma_get_request() then creates the QP of each new id with these attributes */
	if (rdma_create_ep(&id, res, NULL, &attr)) {
		perror("rdma_create_ep");
		rdma_freeaddrinfo(res);
		return NULL;
	}
	rdma_freeaddrinfo(res);
	return id;
}

/* 0 = starting, 1 = listening, 2 = failed: set by the server thread
 * (release), polled by main (acquire) */
static int listening;

static void *server_failed(void)
{
	__atomic_store_n(&listening, 2, __ATOMIC_RELEASE); /* pairs with the acquire load in main */
	return (void *)1L;
}

static void *server(void *arg)
{
	const char *expect = arg;
	const char *netns = getenv("RPCRDMA_PEER_NETNS");
	const char *ready = getenv("RPCRDMA_READY_FILE");
	struct rdma_cm_id *lid, *id;
	long rc = 1;

	if (netns && *netns && !getenv("RPCRDMA_ROLE")) {
		int fd = open(netns, O_RDONLY);
		if (fd < 0 || setns(fd, CLONE_NEWNET)) {
			perror(netns);
			return server_failed();
		}
		close(fd);
		printf("server: thread moved to netns %s\n", netns);
	}
	lid = endpoint(env("RPCRDMA_SERVER_ADDR", "10.0.2.15"), 1, NULL);
	if (!lid || rdma_listen(lid, 1)) {
		perror("rdma_listen");
		return server_failed();
	}
	printf("server: listening on %s:%s\n", env("RPCRDMA_SERVER_ADDR", "10.0.2.15"), PORT);
	fflush(stdout);
	if (ready)
		close(open(ready, O_CREAT | O_WRONLY, 0644));
	__atomic_store_n(&listening, 1, __ATOMIC_RELEASE); /* pairs with the acquire load in main */
	if (rdma_get_request(lid, &id)) {
		perror("rdma_get_request");
		return (void *)rc;
	}
	rc = exchange(id, "server", expect, 1);
	rdma_destroy_ep(id);
	rdma_destroy_ep(lid);
	return (void *)rc;
}

static int client(const char *expect)
{
	struct rdma_cm_id *id = endpoint(env("RPCRDMA_SERVER_ADDR", "10.0.2.15"), 0,
					 getenv("RPCRDMA_CLIENT_ADDR"));
	int rc;

	if (!id)
		return 1;
	rc = exchange(id, "client", expect, 0);
	rdma_destroy_ep(id);
	return rc;
}

int main(int argc, char **argv)
{
	const char *role = env("RPCRDMA_ROLE", "");
	const char *dev = getenv("RPCRDMA_DEVICE");
	const char *peer = env("RPCRDMA_PEER_DEVICE", dev);
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("probe: role=%s device=%s peer_device=%s server=%s client=%s args:", *role ? role : "both",
	       dev ? dev : "-", peer ? peer : "-", env("RPCRDMA_SERVER_ADDR", "-"), env("RPCRDMA_CLIENT_ADDR", "-"));
	for (int i = 1; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n");
	if (!strcmp(role, "server"))
		rc = (int)(long)server((void *)dev);
	else if (!strcmp(role, "client"))
		rc = client(dev);
	else {
		pthread_t t;
		pthread_create(&t, NULL, server, (void *)peer);
		/* pairs with the release store in server() */
		while (!__atomic_load_n(&listening, __ATOMIC_ACQUIRE))
			usleep(10000);
		rc = __atomic_load_n(&listening, __ATOMIC_ACQUIRE) == 1 ? client(dev) : 1;
		void *src;
		pthread_join(t, &src);
		rc |= (int)(long)src;
	}
	printf("probe: %s\n", rc ? "FAILED" : "ok");
	return rc;
}
