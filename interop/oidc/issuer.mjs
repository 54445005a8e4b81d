// A real OAuth 2.0 authorization server for gateway/tests/suite/gateway_oidc.rs: oidc-provider on a
// loopback port, issuing RFC 9068 JWT access tokens (typ at+jwt) for the resource
// https://streams.example through the client-credentials grant, signed with a fresh ES256 key
// and published at its discovery metadata's jwks_uri.
//
// Usage: node issuer.mjs PORT. Prints "listening <issuer>" once it accepts connections.
import Provider from 'oidc-provider';
import { generateKeyPair, exportJWK } from 'jose';

const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;
const audience = 'https://streams.example';

const { privateKey } = await generateKeyPair('ES256', { extractable: true });
const signing = { ...(await exportJWK(privateKey)), kid: `es-${Date.now()}`, alg: 'ES256', use: 'sig' };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'writer',
      client_secret: 'writer-secret',
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_post',
      id_token_signed_response_alg: 'ES256',
    },
    {
      client_id: 'stranger',
      client_secret: 'stranger-secret',
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_post',
      id_token_signed_response_alg: 'ES256',
    },
  ],
  jwks: { keys: [signing] },
  scopes: ['streams'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => audience,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => {
        if (resource !== audience) throw new Error(`unknown resource ${resource}`);
        return {
          scope: 'streams',
          audience,
          accessTokenFormat: 'jwt',
          accessTokenTTL: Number(process.env.ACCESS_TOKEN_TTL || 300),
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
});

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
