package org.melon.yarn;

import java.io.UnsupportedEncodingException;
import java.net.InetAddress;
import java.net.URLDecoder;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import com.sun.net.httpserver.Headers;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.authorize.AccessControlList;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.webapp.util.WebAppUtils;

/**
 * Who may read the AM's pages ({@code /status}, {@code /}, {@code /tensorboard/...}) when the cluster has
 * {@code yarn.acl.enable}: only the RM web proxy, for a user it may show the application to.
 *
 * <p><b>Origin.</b> A page read must come from an address of the RM web proxy: {@code yarn.web-proxy.address}, else
 * the RM's webapp address(es), HA included ({@code WebAppUtils.getProxyHostsAndPortsForAmFilter}, the list Hadoop's
 * own AmIpFilter uses), resolved to addresses (again, at most every {@link #RESOLVE_EVERY_MS}, when a caller is not
 * in the list: an RM that moved). Anyone else (a tenant's container, a user on the network) gets 403 whatever
 * cookies it sends: the cookie below is only believed from the proxy. SPNEGO on the AM is not offered: on a secure
 * cluster the pages are read through the proxy, which authenticates.
 *
 * <p><b>User.</b> Hadoop's WebAppProxyServlet forwards the user it knows in the cookie {@link #COOKIE} (its
 * {@code PROXY_USER_COOKIE_NAME}) and no other cookie of the caller's. Like the RM's own check of an
 * application's {@code VIEW_APP} ACL (ApplicationACLsManager): the application's owner, the users and groups of its
 * VIEW ACL ({@link #ENV}, set by the submitter; none: nobody else) and the YARN admins ({@code yarn.admin.acl})
 * may; without {@code yarn.acl.enable}, everyone (the AM then has no ViewAcl). Groups come from the cluster's group
 * mapping (the AM's Configuration, as on the RM).
 *
 * <p>The executors' registration and heartbeats are not page reads: they need the application's secret instead.
 */
final class ViewAcl {

  /** org.apache.hadoop.yarn.server.webproxy.WebAppProxyServlet.PROXY_USER_COOKIE_NAME (ViewAclTest pins it). */
  static final String COOKIE = "proxy-user";
  /** The application's VIEW_APP ACL ({@code "users groups"}), in the AM's environment. */
  static final String ENV = "MELON_VIEW_ACL";

  private final String appId;
  private final String owner;
  private final AccessControlList view;
  private final AccessControlList admins;
  /** How often a caller not in the list may make the proxy hosts be resolved again. */
  static final long RESOLVE_EVERY_MS = 30_000;
  /** {@code host:port} of the RM web proxies, as configured. */
  private final List<String> proxyHosts;
  // guarded by this
  private Set<InetAddress> proxyAddresses = Collections.emptySet();
  private long resolvedAt = Long.MIN_VALUE / 2;

  ViewAcl(String appId, String owner, String viewAcl, String adminAcl, List<String> proxyHosts) {
    this.appId = appId;
    this.owner = owner;
    this.proxyHosts = Collections.unmodifiableList(new ArrayList<>(proxyHosts));
    // no ACL: YarnConfiguration.DEFAULT_YARN_APP_ACL (" ", nobody), as the RM
    this.view = new AccessControlList(viewAcl == null || viewAcl.isEmpty() ? YarnConfiguration.DEFAULT_YARN_APP_ACL
        : viewAcl);
    this.admins = new AccessControlList(adminAcl == null ? YarnConfiguration.DEFAULT_YARN_ADMIN_ACL : adminAcl);
  }

  /** The AM's check: null (nothing checked) unless the cluster has {@code yarn.acl.enable}. */
  static ViewAcl fromEnvironment(String appId, String owner, Configuration conf) {
    if (!conf.getBoolean(YarnConfiguration.YARN_ACL_ENABLE, YarnConfiguration.DEFAULT_YARN_ACL_ENABLE)) {
      return null;
    }
    return new ViewAcl(appId, owner, System.getenv(ENV),
        conf.get(YarnConfiguration.YARN_ADMIN_ACL, YarnConfiguration.DEFAULT_YARN_ADMIN_ACL),
        WebAppUtils.getProxyHostsAndPortsForAmFilter(conf));
  }

  /** Whether {@code caller} is an address of an RM web proxy (resolving the hosts again if it is not, at most
   * every {@link #RESOLVE_EVERY_MS}). */
  synchronized boolean fromProxy(InetAddress caller) {
    if (!proxyAddresses.contains(caller) && System.currentTimeMillis() - resolvedAt >= RESOLVE_EVERY_MS) {
      resolvedAt = System.currentTimeMillis();
      Set<InetAddress> found = new HashSet<>();
      for (String hostPort : proxyHosts) {
        String host = hostPort.contains(":") ? hostPort.substring(0, hostPort.lastIndexOf(':')) : hostPort;
        try {
          found.addAll(Arrays.asList(InetAddress.getAllByName(host)));
        } catch (UnknownHostException e) {
          MelonApplicationMaster.log("RM web proxy host " + host + " does not resolve: " + e.getMessage());
        }
      }
      proxyAddresses = Collections.unmodifiableSet(found);
    }
    return proxyAddresses.contains(caller);
  }

  boolean allows(String user) {
    if (user.equals(owner)) {
      return true;
    }
    UserGroupInformation ugi = UserGroupInformation.createRemoteUser(user);
    return admins.isUserAllowed(ugi) || view.isUserAllowed(ugi);
  }

  /** 403 unless the request comes from the RM web proxy, and names (in {@link #COOKIE}) no user who may not view
   * this application. */
  void check(InetAddress caller, Headers headers) throws AmHttp.HttpError {
    if (!fromProxy(caller)) {
      throw new AmHttp.HttpError(403, "the pages of " + appId + " are served only through the RM web proxy "
          + proxyHosts + " (<rm>/proxy/" + appId + "/), not to " + caller.getHostAddress() + " directly");
    }
    for (String user : proxyUsers(headers)) {
      if (!allows(user)) {
        throw new AmHttp.HttpError(403, "user " + user + " may not view " + appId + " (owner " + owner
            + "): only its owner, its VIEW_APP ACL and the YARN admins may");
      }
    }
  }

  @Override
  public String toString() {
    return "owner " + owner + ", VIEW_APP [" + view.getAclString() + "], admins [" + admins.getAclString()
        + "], through the RM web proxy " + proxyHosts + " only";
  }

  /** The users named by the request's {@link #COOKIE} cookies (URL-encoded by the proxy), empty ones left out. */
  static List<String> proxyUsers(Headers headers) {
    List<String> users = new ArrayList<>();
    for (String header : headers.getOrDefault("Cookie", Collections.<String>emptyList())) {
      for (String pair : header.split(";")) {
        int eq = pair.indexOf('=');
        if (eq > 0 && COOKIE.equals(pair.substring(0, eq).trim())) {
          String v = pair.substring(eq + 1).trim();
          if (v.length() >= 2 && v.startsWith("\"") && v.endsWith("\"")) {
            v = v.substring(1, v.length() - 1);
          }
          try {
            v = URLDecoder.decode(v, "UTF-8");
          } catch (IllegalArgumentException | UnsupportedEncodingException e) {
            // not URL-encoded: take it as it is
          }
          if (!v.isEmpty()) {
            users.add(v);
          }
        }
      }
    }
    return users;
  }
}
