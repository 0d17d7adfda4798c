package org.melon.yarn;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * The Kerberos side of {@code MiniClusterLauncher --secure 1}: a {@link MiniKdc} on loopback, principals and keytabs
 * in {@code <work>/kerberos}, a client {@code krb5.conf} there, and the Hadoop settings that put HDFS and YARN in
 * Kerberos mode with SPNEGO on their web endpoints (RM REST, NM web, WebHDFS).
 *
 * <p>All daemons run in one JVM, and a Hadoop daemon's Kerberos login ({@code SecurityUtil.login}) sets the JVM-wide
 * UGI login user, so they share one service principal ({@code melon/localhost}): separate nn/dn/rm/nm principals would
 * each replace the previous daemon's identity. SPNEGO accepts any {@code HTTP/*} principal of the service keytab
 * ({@code HTTP/localhost} and {@code HTTP/127.0.0.1}, whichever name a client builds from the URL).
 *
 * <p>DataNode without root: Hadoop's MiniDFSCluster wants privileged ports under Kerberos unless SASL data-transfer
 * protection is set; the DataNode then wants HTTPS unless {@code ignore.secure.ports.for.testing} is set. We set
 * both (SASL authentication on the data path, plain HTTP), which is what a test cluster may do and a real one may not.
 */
final class SecureCluster {

  static final String REALM_ORG = "MELON";
  static final String REALM_DOMAIN = "TEST";
  static final String SERVICE = "melon/localhost";
  static final String[] HTTP = {"HTTP/localhost", "HTTP/127.0.0.1"};
  /** Users with their own keytab: the Airflow service principal and two tenants. */
  static final String[] USERS = {"airflow", "alice", "bob"};

  private final MiniKdc kdc;
  private final File dir;
  private final Map<String, String> keytabs = new LinkedHashMap<>();
  private File krb5Conf;

  private SecureCluster(MiniKdc kdc, File dir) {
    this.kdc = kdc;
    this.dir = dir;
  }

  /** Starts the KDC, writes keytabs and krb5.conf under {@code dir}, and turns {@code conf} secure. */
  static SecureCluster start(File dir, Configuration conf) throws Exception {
    dir.mkdirs();
    Properties kconf = MiniKdc.createConf();
    kconf.setProperty(MiniKdc.ORG_NAME, REALM_ORG);
    kconf.setProperty(MiniKdc.ORG_DOMAIN, REALM_DOMAIN);
    kconf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
    kconf.setProperty(MiniKdc.KDC_PORT, "0");
    File kdcDir = new File(dir, "kdc");
    kdcDir.mkdirs();
    MiniKdc kdc = new MiniKdc(kconf, kdcDir);
    kdc.start();  // sets java.security.krb5.conf for this JVM
    SecureCluster s = new SecureCluster(kdc, dir);
    s.createPrincipals();
    s.writeClientKrb5Conf();
    s.configure(conf);
    UserGroupInformation.setConfiguration(conf);
    System.out.println("MiniClusterLauncher: KDC " + kdc.getRealm() + " on 127.0.0.1:" + kdc.getPort());
    return s;
  }

  String principal(String name) {
    return name + "@" + kdc.getRealm();
  }

  private void createPrincipals() throws Exception {
    File services = new File(dir, "services.keytab");
    String[] names = new String[HTTP.length + 1];
    names[0] = SERVICE;
    System.arraycopy(HTTP, 0, names, 1, HTTP.length);
    kdc.createPrincipal(services, names);
    keytabs.put("services", services.getAbsolutePath());
    for (String user : USERS) {
      File keytab = new File(dir, user + ".keytab");
      kdc.createPrincipal(keytab, user);
      keytabs.put(user, keytab.getAbsolutePath());
    }
  }

  /** For MIT clients (kinit, Python gssapi): TCP to the KDC, and no DNS games with 127.0.0.1 / localhost. */
  private void writeClientKrb5Conf() throws IOException {
    String realm = kdc.getRealm();
    String text = "[libdefaults]\n"
        + "  default_realm = " + realm + "\n"
        + "  udp_preference_limit = 1\n"
        + "  dns_lookup_kdc = false\n"
        + "  dns_lookup_realm = false\n"
        + "  dns_canonicalize_hostname = false\n"
        + "  rdns = false\n"
        + "  forwardable = true\n"
        + "[realms]\n"
        + "  " + realm + " = {\n"
        + "    kdc = 127.0.0.1:" + kdc.getPort() + "\n"
        + "  }\n"
        + "[domain_realm]\n"
        + "  localhost = " + realm + "\n"
        + "  127.0.0.1 = " + realm + "\n";
    krb5Conf = new File(dir, "krb5.conf");
    Files.write(krb5Conf.toPath(), text.getBytes(StandardCharsets.UTF_8));
  }

  private void configure(Configuration conf) throws IOException {
    String service = principal(SERVICE);
    String keytab = keytabs.get("services");
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("hadoop.rpc.protection", "authentication");
    // the Airflow principal submits for the tenants (doAs) like a real gateway would; with --tenants the tenants'
    // narrower rule (only the group `tenants`) stays
    conf.setIfUnset("hadoop.proxyuser.airflow.hosts", "*");
    conf.setIfUnset("hadoop.proxyuser.airflow.groups", "*");

    // HDFS
    conf.set("dfs.namenode.kerberos.principal", service);
    conf.set("dfs.namenode.keytab.file", keytab);
    conf.set("dfs.datanode.kerberos.principal", service);
    conf.set("dfs.datanode.keytab.file", keytab);
    conf.set("dfs.web.authentication.kerberos.principal", "*");
    conf.set("dfs.web.authentication.kerberos.keytab", keytab);
    conf.set("dfs.namenode.kerberos.internal.spnego.principal", principal(HTTP[0]));
    conf.setBoolean("dfs.block.access.token.enable", true);
    conf.set("dfs.data.transfer.protection", "authentication");
    conf.setBoolean("ignore.secure.ports.for.testing", true);

    // YARN
    conf.set("yarn.resourcemanager.principal", service);
    conf.set("yarn.resourcemanager.keytab", keytab);
    conf.set("yarn.nodemanager.principal", service);
    conf.set("yarn.nodemanager.keytab", keytab);
    conf.set("yarn.nodemanager.container-executor.class",
        "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor");
    // containers find the realm as on a real cluster's hosts (/etc/krb5.conf there): Java through
    // java.security.krb5.conf, MIT Kerberos (Python) through KRB5_CONFIG
    String adminEnv = conf.get("yarn.nodemanager.admin-env", "");
    conf.set("yarn.nodemanager.admin-env", (adminEnv.isEmpty() ? "" : adminEnv + ",")
        + "JAVA_TOOL_OPTIONS=-Djava.security.krb5.conf=" + krb5Conf.getAbsolutePath()
        + ",KRB5_CONFIG=" + krb5Conf.getAbsolutePath());

    // SPNEGO on every Hadoop web endpoint (the RM swaps in its delegation-token-aware variant of this filter)
    File secret = new File(dir, "http-signature.secret");
    byte[] bytes = new byte[32];
    new SecureRandom().nextBytes(bytes);
    Files.write(secret.toPath(), Base64.getEncoder().encode(bytes));
    // (with --tenants: its doAs-aware subclass, which authenticates the same way and then applies doAs)
    if (!conf.get("hadoop.http.filter.initializers", "").contains("ProxyUserAuthenticationFilterInitializer")) {
      conf.set("hadoop.http.filter.initializers", "org.apache.hadoop.security.AuthenticationFilterInitializer");
    }
    conf.set("hadoop.http.authentication.type", "kerberos");
    conf.setBoolean("hadoop.http.authentication.simple.anonymous.allowed", false);
    conf.set("hadoop.http.authentication.kerberos.principal", "*");
    conf.set("hadoop.http.authentication.kerberos.keytab", keytab);
    conf.set("hadoop.http.authentication.signature.secret.file", secret.getAbsolutePath());
    writeSiteForFreshConfs(conf);
  }

  /**
   * Configurations built from scratch inside this JVM (the NodeManagers' in-process ContainerLocalizer does
   * {@code new YarnConfiguration()}) see only the classpath's site files, not ours: without
   * {@code dfs.data.transfer.protection} their HDFS client skips the SASL handshake the DataNode requires
   * ("Received ... instead of deadbeef") and localization fails with BlockMissingException. The Python side puts
   * {@code <work>/site} on the launcher's classpath; we write the data-path settings there before any daemon starts.
   */
  private void writeSiteForFreshConfs(Configuration conf) throws IOException {
    File site = new File(dir.getParentFile(), "site");
    site.mkdirs();
    StringBuilder xml = new StringBuilder("<?xml version=\"1.0\"?>\n<configuration>\n");
    for (String key : new String[] {"dfs.data.transfer.protection", "dfs.block.access.token.enable",
        "dfs.namenode.kerberos.principal", "hadoop.security.authentication"}) {
      xml.append("  <property><name>").append(key).append("</name><value>").append(conf.get(key))
          .append("</value></property>\n");
    }
    xml.append("</configuration>\n");
    Files.write(new File(site, "hdfs-site.xml").toPath(), xml.toString().getBytes(StandardCharsets.UTF_8));
  }

  /** Entries for the details JSON: realm, krb5.conf, principals and keytabs. */
  Map<String, Object> details() {
    StringBuilder kt = new StringBuilder("{");
    StringBuilder pr = new StringBuilder("{");
    for (Map.Entry<String, String> e : keytabs.entrySet()) {
      String name = e.getKey().equals("services") ? SERVICE : e.getKey();
      if (kt.length() > 1) {
        kt.append(", ");
        pr.append(", ");
      }
      kt.append(Json.quote(e.getKey())).append(": ").append(Json.quote(e.getValue()));
      pr.append(Json.quote(e.getKey())).append(": ").append(Json.quote(principal(name)));
    }
    Map<String, Object> d = new LinkedHashMap<>();
    d.put("secure", 1);
    d.put("realm", kdc.getRealm());
    d.put("kdc", "127.0.0.1:" + kdc.getPort());
    d.put("krb5_conf", krb5Conf.getAbsolutePath());
    d.put("java_krb5_conf", kdc.getKrb5conf().getAbsolutePath());
    d.put("service_principal", principal(SERVICE));
    d.put("rm_principal", principal(SERVICE));
    d.put("http_principals", new RawJson("[" + Json.quote(principal(HTTP[0])) + ", "
        + Json.quote(principal(HTTP[1])) + "]"));
    d.put("keytabs", new RawJson(kt.append("}").toString()));
    d.put("principals", new RawJson(pr.append("}").toString()));
    return d;
  }

  void stop() {
    kdc.stop();
  }

  /** A value the details writer emits as is (its toString is already JSON). */
  static final class RawJson {
    private final String json;

    RawJson(String json) {
      this.json = json;
    }

    @Override
    public String toString() {
      return json;
    }
  }
}
